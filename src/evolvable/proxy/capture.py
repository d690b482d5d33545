"""From raw capture records (what the request path spools) to ATDP events (what the store applies).

The request path does as little as possible: it spools the request body it sent, the upstream's
reply (parsed JSON, or the raw SSE text of a stream) and timings. Everything else happens here, in
the background writer: assembling streams, building `LLMCallStep`s, turning `role: tool` messages into
`ToolCallStep`s linked to the call that asked for them. Event and step ids derive from ids in the
records, so replaying a record after a crash yields the same events (the store ignores repeats).
"""

from __future__ import annotations

import hashlib
import logging
from collections import OrderedDict
from datetime import UTC, datetime
from operator import itemgetter
from typing import Any

import msgspec
import orjson
from pydantic import TypeAdapter, ValidationError

from evolvable.protocol.models import (
    ChatMessage,
    CompletionChoice,
    ErrorInfo,
    Event,
    LLMCallStep,
    Signal,
    SignalAttached,
    SignalKind,
    Step,
    StepAppended,
    StepStatus,
    ToolCallStep,
    TrajectoryEnded,
    TrajectoryStatus,
    Usage,
)
from evolvable.proxy.records import (
    AnyRecord,
    CallRecord,
    EndRecord,
    SessionRecord,
    SignalRecord,
    StepRecord,
    run_started,
)

log = logging.getLogger("evolvable.proxy.capture")

TOKEN_FIELDS = ("return_token_ids", "logprobs")
"""Request fields the proxy adds for token capture (vLLM names)."""
_NOT_SAMPLING = {"model", "messages", "prompt", "tools", "stream", "stream_options", "user"}
_STEP_ADAPTER: TypeAdapter[Step] = TypeAdapter(Step)
_MESSAGES_ADAPTER: TypeAdapter[list[ChatMessage]] = TypeAdapter(list[ChatMessage])
_LOGPROB = itemgetter("logprob")
_IS_FLOAT = float.__instancecheck__


def llm_step_id(request_id: str) -> str:
    return f"step_{request_id}"


def tool_step_id(trajectory_id: str, tool_call_id: str) -> str:
    """Implicit (from a `role: tool` message) and explicit (`/steps`) reports of one tool call share it."""
    digest = hashlib.sha256(f"{trajectory_id}\x00{tool_call_id}".encode()).hexdigest()[:32]
    return f"step_tool_{digest}"


def _ts(epoch: float | None) -> datetime:
    return datetime.fromtimestamp(epoch, UTC) if epoch else datetime.now(UTC)


# --------------------------------------------------------------------------- reply shaping (request path)


def strip_token_fields(reply: dict[str, Any], keep_token_ids: bool, keep_logprobs: bool) -> None:
    """Remove what the proxy asked for and the client did not (in place; a reply or a stream chunk)."""
    if not keep_token_ids:
        reply.pop("prompt_token_ids", None)
        reply.pop("prompt_logprobs", None)
    for choice in reply.get("choices") or ():
        if not isinstance(choice, dict):
            continue
        if not keep_token_ids:
            choice.pop("token_ids", None)
            choice.pop("prompt_token_ids", None)
        if not keep_logprobs and "logprobs" in choice:
            choice["logprobs"] = None


class _ReplyShape(msgspec.Struct):
    """All the request path needs to know of a reply it passes on as it came: a JSON object with a `choices` array
    (anything else is answered 502, never recorded as a call that succeeded)."""

    choices: list[msgspec.Raw]


_REPLY_SHAPE = msgspec.json.Decoder(_ReplyShape)


def check_reply_shape(raw: bytes) -> None:
    """Raise ValueError unless `raw` is UTF-8 JSON for an object with a `choices` array. The JSON is validated
    without being built, which matters most for a reply that carries token ids and logprobs
    (docs/PERFORMANCE.md, session 8). The verdict is that of parsing it, except that a reply naming `choices` twice
    needs an array in each."""
    _decoded(_REPLY_SHAPE, raw)


def _decoded(decoder: msgspec.json.Decoder[Any], raw: bytes) -> Any:
    """`raw` decoded as a reply, or ValueError: malformed JSON, the wrong shape, or bytes that are not UTF-8."""
    try:
        value = decoder.decode(raw)
        if not raw.isascii():
            raw.decode("utf-8")  # (msgspec does not check the bytes of strings it skips)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError) as err:  # (ValidationError is a DecodeError)
        raise ValueError(f"not a chat reply: {err}") from None
    return value


_RAW_FIELDS: msgspec.json.Decoder[dict[str, Any]] = msgspec.json.Decoder(dict[str, msgspec.Raw])
_RAW_ITEMS = msgspec.json.Decoder(list[msgspec.Raw])
_RAW_ENCODER = msgspec.json.Encoder()


def stripped_reply(raw: bytes, keep_token_ids: bool, keep_logprobs: bool) -> bytes:
    """`raw` (a chat or completions reply) as `strip_token_fields` leaves it, for the client; ValueError when it
    is not a reply (as `check_reply_shape`, except that of a `choices` key named twice the last counts, as in a
    parse).

    Only the reply's own keys and each choice's are decoded, and `strip_token_fields` runs on those: every other
    value (the token ids and logprobs it drops, the message) is passed on as the bytes that came (`msgspec.Raw`),
    never built into Python objects. With 2,000 prompt and 300 completion token ids per reply the request path
    took 2.8x less CPU per call than parsing it to check it and again to strip it (`capture_cpu.py --tokens`,
    docs/PERFORMANCE.md, session 8)."""
    reply = _decoded(_RAW_FIELDS, raw)
    if "choices" not in reply:
        raise ValueError("not a chat reply: no choices")
    try:
        choices = _RAW_ITEMS.decode(reply["choices"])
    except msgspec.DecodeError as err:
        raise ValueError(f"not a chat reply: {err}") from None
    reply["choices"] = [_RAW_FIELDS.decode(c) if bytes(c).lstrip().startswith(b"{") else c for c in choices]
    strip_token_fields(reply, keep_token_ids, keep_logprobs)  # (a choice that is not an object is left as it came)
    return _RAW_ENCODER.encode(reply)


def has_token_fields(raw: bytes) -> bool:
    """Cheap pre-check: can this reply (or these SSE events) hold fields to strip? Saves a parse when not.
    (Four substring searches in C, chained: 0.75 us on a 350-byte reply, against 1.7 for a generator over the
    markers and 2.9 for one regular expression with the four as alternatives.)"""
    return b"token_ids" in raw or b'"logprobs":{' in raw or b'"logprobs": {' in raw or b"prompt_logprobs" in raw


class SSEStripper:
    """Rewrites an SSE byte stream event by event (removing token fields), holding back only a partial event."""

    def __init__(self, keep_token_ids: bool, keep_logprobs: bool) -> None:
        self.keep_token_ids, self.keep_logprobs = keep_token_ids, keep_logprobs
        self._pending = b""

    def feed(self, chunk: bytes) -> bytes:
        data = self._pending + chunk
        cut = max(data.rfind(b"\n\n"), data.rfind(b"\r\n\r\n"))
        if cut < 0:
            self._pending = data
            return b""
        sep = 4 if data[cut : cut + 4] == b"\r\n\r\n" else 2
        complete, self._pending = data[: cut + sep], data[cut + sep :]
        if not has_token_fields(complete):
            return complete
        out = []
        for line in complete.splitlines(keepends=True):
            if line.startswith(b"data:") and not line[5:].strip().startswith(b"[DONE]"):
                try:
                    obj = orjson.loads(line[5:])
                except orjson.JSONDecodeError:
                    out.append(line)
                    continue
                if isinstance(obj, dict):
                    strip_token_fields(obj, self.keep_token_ids, self.keep_logprobs)
                ending = b"\r\n" if line.endswith(b"\r\n") else b"\n"
                out.append(b"data: " + orjson.dumps(obj) + ending)
            else:
                out.append(line)
        return b"".join(out)

    def flush(self) -> bytes:
        rest, self._pending = self._pending, b""
        return rest


# --------------------------------------------------------------------------- stream assembly (writer)


def _token_logprobs(logprobs: Any) -> list[float] | None:
    """Sampled-token logprobs from chat (`content[j].logprob`) or legacy completions (`token_logprobs`)."""
    if not isinstance(logprobs, dict):
        return None
    content = logprobs.get("content")
    if isinstance(content, list):
        try:  # the usual shape, every entry a dict with a float: one pass in C, no call per token
            values = list(map(_LOGPROB, content))
            if all(map(_IS_FLOAT, values)):
                return values
        except (KeyError, TypeError):
            pass
        return [float(e.get("logprob", 0.0)) for e in content if isinstance(e, dict)]
    if isinstance(logprobs.get("token_logprobs"), list):
        return [float(x) if x is not None else 0.0 for x in logprobs["token_logprobs"]]
    return None


def assemble_stream(sse_text: str) -> dict[str, Any]:
    """Rebuild a non-streaming reply (chat or completions) from SSE chunks, incl. streamed tool-call
    deltas, token ids and logprobs. Unparseable events are counted, not fatal.

    Texts and token lists gather in lists joined once at the end (adding each chunk's piece to the text so far
    copied it again for every chunk: quadratic in a stream of one token per chunk), and a choice's accumulator
    is made once, not per chunk."""
    reply: dict[str, Any] = {"choices": []}
    choices: dict[int, _StreamChoice] = {}
    bad = 0
    for raw_line in sse_text.splitlines():
        line = raw_line.strip()
        if not line.startswith("data:"):
            continue
        payload = line[5:].strip()
        if payload == "[DONE]":
            continue
        try:
            chunk = orjson.loads(payload)
        except orjson.JSONDecodeError:
            bad += 1
            continue
        if not isinstance(chunk, dict):
            bad += 1
            continue
        for key in _STREAM_HEADER_KEYS:
            if key not in reply and chunk.get(key) is not None:
                reply[key] = chunk[key]
        if chunk.get("error") is not None:
            reply["error"] = chunk["error"]
        if chunk.get("usage"):
            reply["usage"] = chunk["usage"]
        if chunk.get("prompt_token_ids") is not None:
            reply["prompt_token_ids"] = chunk["prompt_token_ids"]
        for c in chunk.get("choices") or ():
            idx = int(c.get("index", 0))
            acc = choices.get(idx)
            if acc is None:
                acc = choices[idx] = _StreamChoice()
            delta = c.get("delta")
            if isinstance(delta, dict):
                if delta.get("role"):
                    acc.role = delta["role"]
                if delta.get("content") is not None:
                    acc.content.append(str(delta["content"]))
                for tc in delta.get("tool_calls") or ():
                    slot = acc.tool_calls.setdefault(
                        int(tc.get("index", 0)), {"id": None, "type": "function", "name": "", "arguments": ""}
                    )
                    if tc.get("id"):
                        slot["id"] = tc["id"]
                    fn = tc.get("function") or {}
                    if fn.get("name"):
                        slot["name"] += fn["name"]
                    if fn.get("arguments"):
                        slot["arguments"] += fn["arguments"]
            if c.get("text") is not None:
                acc.text.append(str(c["text"]))
            if c.get("token_ids") is not None:
                acc.ids = acc.ids or []
                acc.ids.extend(c["token_ids"])
            if c.get("prompt_token_ids") is not None:
                acc.prompt_token_ids = c["prompt_token_ids"]
            if c.get("logprobs") is not None:
                lps = _token_logprobs(c["logprobs"])
                if lps is not None:
                    acc.lps = acc.lps or []
                    acc.lps.extend(lps)
            if c.get("finish_reason") is not None:
                acc.finish_reason = c["finish_reason"]
    for idx in sorted(choices):
        reply["choices"].append(choices[idx].choice(idx))
    if bad:
        reply["_malformed_chunks"] = bad
    return reply


_STREAM_HEADER_KEYS = ("id", "model", "created", "object", "system_fingerprint")


class _StreamChoice:
    """What the chunks of one choice said so far."""

    __slots__ = ("content", "finish_reason", "ids", "lps", "prompt_token_ids", "role", "text", "tool_calls")

    def __init__(self) -> None:
        self.content: list[str] = []
        self.text: list[str] = []
        self.role: Any = None
        self.tool_calls: dict[int, dict[str, Any]] = {}
        self.ids: list[Any] | None = None
        self.lps: list[float] | None = None
        self.finish_reason: Any = None
        self.prompt_token_ids: Any = None

    def choice(self, idx: int) -> dict[str, Any]:
        """The choice as a non-streaming reply has it."""
        choice: dict[str, Any] = {"index": idx, "finish_reason": self.finish_reason}
        if self.text and self.role is None and not self.content:
            choice["text"] = "".join(self.text)
        else:
            content = "".join(self.content) if self.content else None
            msg: dict[str, Any] = {"role": self.role or "assistant", "content": content}
            if self.tool_calls:
                msg["tool_calls"] = [
                    {
                        "id": t["id"] or f"call_{idx}_{i}",
                        "type": t["type"],
                        "function": {"name": t["name"], "arguments": t["arguments"]},
                    }
                    for i, t in sorted(self.tool_calls.items())
                ]
            choice["message"] = msg
        if self.ids is not None:
            choice["token_ids"] = self.ids
        if self.prompt_token_ids is not None:
            choice["prompt_token_ids"] = self.prompt_token_ids
        if self.lps is not None:
            choice["_logprob_values"] = self.lps
        return choice


# --------------------------------------------------------------------------- records -> steps


def _usage_fields(raw: Any) -> dict[str, int] | None:
    """A reply's usage as the ints `Usage` holds; None when it is not an object or a count is not a number."""
    if not isinstance(raw, dict):
        return None
    try:
        return {
            "prompt_tokens": int(raw.get("prompt_tokens") or 0),
            "completion_tokens": int(raw.get("completion_tokens") or 0),
            "total_tokens": int(raw.get("total_tokens") or 0),
        }
    except (TypeError, ValueError):
        return None


def _usage(raw: Any) -> Usage | None:
    fields = _usage_fields(raw)
    if fields is None:
        return None
    try:
        return Usage.model_validate(fields)
    except ValidationError:
        return None


def _choice_fields(raw: dict[str, Any]) -> dict[str, Any]:
    """One choice as the plain data `CompletionChoice` validates (TypeError/ValueError: a field that is not one)."""
    message = None
    if isinstance(raw.get("message"), dict):
        message = dict(raw["message"])
        message.setdefault("role", "assistant")
    ids = raw.get("token_ids")
    lps = raw.get("_logprob_values")
    if lps is None:
        lps = _token_logprobs(raw.get("logprobs"))
    if ids is not None and lps is not None and len(ids) != len(lps):
        lps = None  # misaligned engine output: keep the ids, drop what cannot be trusted
    return {
        "index": int(raw.get("index", 0)),
        "message": message,
        "text": raw.get("text") if message is None else None,
        "finish_reason": raw.get("finish_reason"),
        "completion_token_ids": ids,
        "logprobs": lps,
    }


def _choice(raw: dict[str, Any]) -> CompletionChoice:
    """One choice, validated in one pass from plain data (nested constructors cost about 1.5x the CPU)."""
    return CompletionChoice.model_validate(_choice_fields(raw))


def _request_messages(raw: Any) -> tuple[list[ChatMessage], int]:
    """The request's messages as models, and how many could not be (a provider-specific role, ...): those are
    left out, the call is kept. All at once first (one validator call), one by one only when one is bad."""
    try:
        return _MESSAGES_ADAPTER.validate_python(raw), 0
    except ValidationError:
        pass
    messages, unparsed = [], 0
    for m in raw:
        try:
            messages.append(ChatMessage.model_validate(m))
        except ValidationError:
            unparsed += 1
    return messages, unparsed


def build_llm_step(rec: CallRecord) -> LLMCallStep:
    """The llm_call step for one call record. Robust to malformed replies: they become error steps.

    Fields are gathered first and the step is validated once, messages, choices and usage included, as plain
    data (one validator call instead of one per part and one for the step that holds them: 1.3x less CPU for
    the mock's call). When that fails, `llm_step_in_parts` builds it part by part, which leaves out the
    messages that cannot be parsed, turns a reply whose choices cannot be into an error step, and drops a
    usage it cannot read: what it makes of a call that validates in one pass is the same step (tested)."""
    fields, reply = _call_fields(rec)
    try:
        return _llm_step_in_one_pass(rec, fields, reply)
    except (ValidationError, TypeError, ValueError):  # (ValidationError is a ValueError; named for the reader)
        return _llm_step_in_parts(rec, fields, reply)


def _call_fields(rec: CallRecord) -> tuple[dict[str, Any], Any]:
    """The step's fields both ways of building it share, and the reply (a stream assembled)."""
    req = rec.request
    injected = set(rec.injected)
    endpoint = rec.endpoint
    latency = rec.latency_ms
    metadata: dict[str, Any] = {k: v for k, v in (("upstream", rec.upstream), ("client_model", rec.client_model)) if v}
    if rec.wire:
        metadata["wire"] = rec.wire  # the protocol the client spoke (proxy.wire), its response id
    if rec.sub_agent and rec.harness_version:  # a sub-agent's call: its own harness version, not the session's
        metadata["harness_version"] = rec.harness_version
    fields: dict[str, Any] = {
        "id": llm_step_id(rec.request_id),
        "agent": rec.agent,
        "started_at": _ts(rec.started),
        "ended_at": datetime.fromtimestamp(rec.started + latency / 1000.0, UTC) if rec.started and latency else None,
        "endpoint": endpoint,
        "model": req.get("model"),
        "tools": req.get("tools"),
        "sampling": {k: v for k, v in req.items() if k not in _NOT_SAMPLING and k not in injected},
        "stream": rec.stream,
        "policy_version": rec.policy_version,
        "latency_ms": latency,
        "time_to_first_token_ms": rec.ttft_ms,
        "request_id": rec.request_id,
        "metadata": metadata,
    }
    if endpoint != "chat":
        prompt = req.get("prompt")
        fields["prompt"] = prompt if isinstance(prompt, str) else orjson.dumps(prompt).decode() if prompt else None
    reply = rec.reply
    if reply is None and rec.sse is not None:
        reply = assemble_stream(rec.sse) if not rec.sse_wire else _native_stream(rec.sse_wire, rec.sse)
    return fields, reply


def _reply_fields(fields: dict[str, Any], reply: dict[str, Any], choices: list[Any], usage: Any) -> None:
    """What a reply adds to the step's fields, its choices and usage made by the caller."""
    fields["choices"] = choices
    fields["response_id"] = reply.get("id") if isinstance(reply.get("id"), str) else None
    fields["model"] = reply.get("model") or fields["model"]
    fields["usage"] = usage
    ptids = reply.get("prompt_token_ids")
    if ptids is None and choices:
        first = (reply.get("choices") or [{}])[0]
        ptids = first.get("prompt_token_ids") if isinstance(first, dict) else None
    fields["prompt_token_ids"] = list(ptids) if isinstance(ptids, list) else None
    if reply.get("_malformed_chunks"):
        fields["metadata"]["malformed_chunks"] = reply["_malformed_chunks"]


def _llm_step_in_one_pass(rec: CallRecord, shared: dict[str, Any], reply: Any) -> LLMCallStep:
    """The step validated once from plain data; raises where `llm_step_in_parts` would leave something out.
    `shared` is left as it came (the fallback starts from it)."""
    fields = {**shared, "metadata": dict(shared["metadata"])}
    if rec.endpoint == "chat":
        fields["request_messages"] = rec.request.get("messages") or []
    if isinstance(reply, dict):
        choices = [_choice_fields(c) for c in reply.get("choices") or () if isinstance(c, dict)]
        _reply_fields(fields, reply, choices, _usage_fields(reply.get("usage")))
    err = rec.error
    if err:
        fields["status"] = StepStatus.error
        fields["error"] = {
            "type": str(err.get("type") or "error"),
            "message": str(err.get("message") or ""),
            "status_code": err.get("status"),
        }
    return LLMCallStep.model_validate(fields)


def llm_step_in_parts(rec: CallRecord) -> LLMCallStep:
    """The step built part by part, keeping what can be parsed (see `build_llm_step`)."""
    return _llm_step_in_parts(rec, *_call_fields(rec))


def _llm_step_in_parts(rec: CallRecord, fields: dict[str, Any], reply: Any) -> LLMCallStep:
    metadata = fields["metadata"]
    if rec.endpoint == "chat":
        messages, unparsed = _request_messages(rec.request.get("messages") or [])
        fields["request_messages"] = messages
        if unparsed:
            metadata["unparsed_messages"] = unparsed
    err = rec.error
    if isinstance(reply, dict):
        choices: list[CompletionChoice] = []
        try:
            choices = [_choice(c) for c in reply.get("choices") or () if isinstance(c, dict)]
        except (ValidationError, TypeError, ValueError) as parse_error:
            err = err or {"type": "malformed_reply", "message": f"cannot parse choices: {parse_error}"}
        _reply_fields(fields, reply, choices, _usage(reply.get("usage")))
    if err:
        fields["status"] = StepStatus.error
        fields["error"] = ErrorInfo(
            type=str(err.get("type") or "error"), message=str(err.get("message") or ""), status_code=err.get("status")
        )
    return LLMCallStep(**fields)


class Converter:
    """Turns capture records into events, remembering per trajectory which llm_call requested which tool
    call (bounded LRU). It never reads the store: after a restart, a tool result whose call was made
    before it is still linked by name and arguments from the conversation the request carries (the
    assistant message that asked for it), only its `llm_step_id` stays unknown."""

    def __init__(self, max_trajectories: int = 10_000):
        self._max = max_trajectories
        self._tool_index: OrderedDict[str, dict[str, tuple[str | None, str, str | None]]] = OrderedDict()
        self._seen_tools: OrderedDict[str, set[str]] = OrderedDict()

    def _index(self, trajectory_id: str) -> dict[str, tuple[str | None, str, str | None]]:
        index = self._tool_index.get(trajectory_id)
        if index is None:
            index = self._tool_index[trajectory_id] = {}
            while len(self._tool_index) > self._max:
                self._tool_index.popitem(last=False)
        else:
            self._tool_index.move_to_end(trajectory_id)
        return index

    @staticmethod
    def _remember(index: dict[str, tuple[str | None, str, str | None]], step: LLMCallStep) -> None:
        for choice in step.choices:
            for tc in (choice.message.tool_calls or []) if choice.message else []:
                index[tc.id] = (step.id, tc.function.name, tc.function.arguments)

    def _seen(self, trajectory_id: str) -> set[str]:
        seen = self._seen_tools.get(trajectory_id)
        if seen is None:
            seen = self._seen_tools[trajectory_id] = set()
            while len(self._seen_tools) > self._max:
                self._seen_tools.popitem(last=False)
        return seen

    def convert(self, rec: AnyRecord) -> list[Event]:
        tid, tenant = rec.trajectory_id, rec.tenant_id
        if isinstance(rec, SessionRecord):
            return [rec.started()]
        if isinstance(rec, CallRecord):
            return self._call_events(rec, tid, tenant, _ts(rec.at or rec.started))
        if isinstance(rec, StepRecord):
            step = _STEP_ADAPTER.validate_python(rec.step)
            if isinstance(step, ToolCallStep) and step.tool_call_id:
                self._seen(tid).add(step.tool_call_id)
                if step.llm_step_id is None:  # link an explicit report to the call that requested it
                    linked = self._index(tid).get(step.tool_call_id)
                    if linked is not None and linked[0] is not None:
                        step.llm_step_id = step.parent_step_id = linked[0]
            return [StepAppended(event_id=f"{tid}:{step.id}", trajectory_id=tid, tenant_id=tenant, step=step)]
        if isinstance(rec, SignalRecord):
            signal = Signal.model_validate(rec.signal)
            return [SignalAttached(event_id=f"{tid}:{signal.id}", trajectory_id=tid, tenant_id=tenant, signal=signal)]
        return self._end_events(rec, tid, tenant, _ts(rec.at))

    @staticmethod
    def _end_events(rec: EndRecord, tid: str, tenant: str, at: datetime) -> list[Event]:
        events: list[Event] = []
        if rec.outcome is not None:
            signal = Signal(
                id=f"sig_outcome_{rec.id}",
                kind=SignalKind.outcome,
                value=float(rec.outcome),
                source=rec.source or "session_end",
                created_at=at,
            )
            events.append(
                SignalAttached(event_id=f"{tid}:{signal.id}", trajectory_id=tid, tenant_id=tenant, signal=signal)
            )
        events.append(
            TrajectoryEnded(
                event_id=f"{tid}:end",
                trajectory_id=tid,
                tenant_id=tenant,
                status=TrajectoryStatus(rec.status),
                ended_at=at,
                metadata={"end_reason": rec.reason} if rec.reason else {},
            )
        )
        return events

    def _call_events(self, rec: CallRecord, tid: str, tenant: str, at: datetime) -> list[Event]:
        step = build_llm_step(rec)
        events: list[Event] = []
        standalone = rec.session_id is None
        if standalone:  # a run of one call: its header says how it ended, no end event (nor a ledger row) needed
            start = run_started(
                rec,
                started_at=rec.at or rec.started,
                metadata={"session": "none"},
                status=TrajectoryStatus.failed if step.status == StepStatus.error else TrajectoryStatus.completed,
                ended_at=step.ended_at or at,
            )
            events.append(start)
        else:
            index, seen = self._index(tid), self._seen(tid)
            asked = _asked_in_conversation(rec.request)
            for m in step.request_messages:
                if m.role != "tool" or not m.tool_call_id or m.tool_call_id in seen:
                    continue
                seen.add(m.tool_call_id)
                fallback = asked.get(m.tool_call_id, (None, m.name or "unknown", None))
                llm_id, name, arguments = index.get(m.tool_call_id, fallback)
                tool = ToolCallStep(
                    id=tool_step_id(tid, m.tool_call_id),
                    agent=rec.agent,
                    parent_step_id=llm_id,
                    started_at=at,
                    tool_name=name,
                    arguments=_parse_arguments(arguments),
                    result=m.content,
                    status=StepStatus.unknown,
                    tool_call_id=m.tool_call_id,
                    llm_step_id=llm_id,
                    metadata={"source": "next_request"},
                )
                events.append(StepAppended(event_id=f"{tid}:{tool.id}", trajectory_id=tid, tenant_id=tenant, step=tool))
            self._remember(index, step)
        events.append(StepAppended(event_id=f"{tid}:{step.id}", trajectory_id=tid, tenant_id=tenant, step=step))
        return events


def _asked_in_conversation(request: dict[str, Any]) -> dict[str, tuple[str | None, str, str | None]]:
    """Tool calls the assistant messages of a request's conversation asked for: (None, name, arguments)."""
    asked: dict[str, tuple[str | None, str, str | None]] = {}
    for m in request.get("messages") or ():
        if not isinstance(m, dict) or m.get("role") != "assistant":
            continue
        for tc in m.get("tool_calls") or ():
            fn = tc.get("function") if isinstance(tc, dict) else None
            if isinstance(fn, dict) and isinstance(tc.get("id"), str):
                arguments = fn.get("arguments")
                asked[tc["id"]] = (
                    None,
                    str(fn.get("name") or "unknown"),
                    arguments if isinstance(arguments, str) else None,
                )
    return asked


def _native_stream(protocol: str, sse_text: str) -> dict[str, Any]:
    """A stream a native upstream sent in its own protocol, as the chat reply it amounts to."""
    from evolvable.proxy.wire import messages_native, responses_native

    if protocol == "responses":
        return responses_native.chat_reply_from_stream(sse_text)
    return messages_native.chat_reply_from_stream(sse_text)


def _parse_arguments(arguments: str | None) -> dict[str, Any] | str | None:
    if not arguments:
        return arguments
    try:
        value = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return arguments
    return value if isinstance(value, dict) else arguments
