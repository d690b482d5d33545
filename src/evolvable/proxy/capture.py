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
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

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
    TrajectoryHeader,
    TrajectoryStarted,
    TrajectoryStatus,
    Usage,
)

log = logging.getLogger("evolvable.proxy.capture")

TOKEN_FIELDS = ("return_token_ids", "logprobs")
"""Request fields the proxy adds for token capture (vLLM names)."""
_NOT_SAMPLING = {"model", "messages", "prompt", "tools", "stream", "stream_options", "user"}
_STEP_ADAPTER: TypeAdapter[Step] = TypeAdapter(Step)


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


_TOKEN_MARKERS = (b"token_ids", b'"logprobs":{', b'"logprobs": {', b"prompt_logprobs")


def has_token_fields(raw: bytes) -> bool:
    """Cheap pre-check: can this reply (or these SSE events) hold fields to strip? Saves a parse when not."""
    return any(marker in raw for marker in _TOKEN_MARKERS)


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
    if isinstance(logprobs.get("content"), list):
        return [float(e.get("logprob", 0.0)) for e in logprobs["content"] if isinstance(e, dict)]
    if isinstance(logprobs.get("token_logprobs"), list):
        return [float(x) if x is not None else 0.0 for x in logprobs["token_logprobs"]]
    return None


def assemble_stream(sse_text: str) -> dict[str, Any]:
    """Rebuild a non-streaming reply (chat or completions) from SSE chunks, incl. streamed tool-call
    deltas, token ids and logprobs. Unparseable events are counted, not fatal."""
    reply: dict[str, Any] = {"choices": []}
    choices: dict[int, dict[str, Any]] = {}
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
        for key in ("id", "model", "created", "object", "system_fingerprint"):
            if chunk.get(key) is not None and key not in reply:
                reply[key] = chunk[key]
        if chunk.get("error") is not None:
            reply["error"] = chunk["error"]
        if chunk.get("usage"):
            reply["usage"] = chunk["usage"]
        if chunk.get("prompt_token_ids") is not None:
            reply["prompt_token_ids"] = chunk["prompt_token_ids"]
        for c in chunk.get("choices") or ():
            idx = int(c.get("index", 0))
            acc = choices.setdefault(
                idx,
                {
                    "index": idx,
                    "content": None,
                    "text": None,
                    "role": None,
                    "tool_calls": {},
                    "ids": None,
                    "lps": None,
                    "finish_reason": None,
                    "prompt_token_ids": None,
                },
            )
            delta = c.get("delta")
            if isinstance(delta, dict):
                if delta.get("role"):
                    acc["role"] = delta["role"]
                if delta.get("content") is not None:
                    acc["content"] = (acc["content"] or "") + str(delta["content"])
                for tc in delta.get("tool_calls") or ():
                    slot = acc["tool_calls"].setdefault(
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
                acc["text"] = (acc["text"] or "") + str(c["text"])
            if c.get("token_ids") is not None:
                acc["ids"] = (acc["ids"] or []) + list(c["token_ids"])
            if c.get("prompt_token_ids") is not None:
                acc["prompt_token_ids"] = c["prompt_token_ids"]
            lps = _token_logprobs(c.get("logprobs"))
            if lps is not None:
                acc["lps"] = (acc["lps"] or []) + lps
            if c.get("finish_reason") is not None:
                acc["finish_reason"] = c["finish_reason"]
    for idx in sorted(choices):
        acc = choices[idx]
        choice: dict[str, Any] = {"index": idx, "finish_reason": acc["finish_reason"]}
        if acc["text"] is not None and acc["role"] is None and acc["content"] is None:
            choice["text"] = acc["text"]
        else:
            msg: dict[str, Any] = {"role": acc["role"] or "assistant", "content": acc["content"]}
            if acc["tool_calls"]:
                msg["tool_calls"] = [
                    {
                        "id": t["id"] or f"call_{idx}_{i}",
                        "type": t["type"],
                        "function": {"name": t["name"], "arguments": t["arguments"]},
                    }
                    for i, t in sorted(acc["tool_calls"].items())
                ]
            choice["message"] = msg
        if acc["ids"] is not None:
            choice["token_ids"] = acc["ids"]
        if acc["prompt_token_ids"] is not None:
            choice["prompt_token_ids"] = acc["prompt_token_ids"]
        if acc["lps"] is not None:
            choice["_logprob_values"] = acc["lps"]
        reply["choices"].append(choice)
    if bad:
        reply["_malformed_chunks"] = bad
    return reply


# --------------------------------------------------------------------------- records -> steps


def _usage(raw: Any) -> Usage | None:
    if not isinstance(raw, dict):
        return None
    try:
        return Usage(
            prompt_tokens=int(raw.get("prompt_tokens") or 0),
            completion_tokens=int(raw.get("completion_tokens") or 0),
            total_tokens=int(raw.get("total_tokens") or 0),
        )
    except (TypeError, ValueError, ValidationError):
        return None


def _choice(raw: dict[str, Any]) -> CompletionChoice:
    message = None
    if isinstance(raw.get("message"), dict):
        m = dict(raw["message"])
        m.setdefault("role", "assistant")
        message = ChatMessage.model_validate(m)
    ids = raw.get("token_ids")
    lps = raw.get("_logprob_values")
    if lps is None:
        lps = _token_logprobs(raw.get("logprobs"))
    if ids is not None and lps is not None and len(ids) != len(lps):
        lps = None  # misaligned engine output: keep the ids, drop what cannot be trusted
    return CompletionChoice(
        index=int(raw.get("index", 0)),
        message=message,
        text=raw.get("text") if message is None else None,
        finish_reason=raw.get("finish_reason"),
        completion_token_ids=list(ids) if ids is not None else None,
        logprobs=lps,
    )


def build_llm_step(rec: dict[str, Any]) -> LLMCallStep:
    """The llm_call step for one call record. Robust to malformed replies: they become error steps.

    Fields are gathered first and the model is built once (assignments would each be validated)."""
    req: dict[str, Any] = rec.get("req") or {}
    injected = set(rec.get("injected") or ())
    endpoint = rec.get("ep", "chat")
    latency = rec.get("lat")
    metadata: dict[str, Any] = {k: v for k, v in (("upstream", rec.get("up")), ("client_model", rec.get("cm"))) if v}
    if rec.get("wire"):
        metadata["wire"] = rec["wire"]  # the protocol the client spoke (proxy.wire), its response id
    if rec.get("sub") and rec.get("hv"):  # a sub-agent's call: its own harness version, not the session's
        metadata["harness_version"] = rec["hv"]
    fields: dict[str, Any] = {
        "id": llm_step_id(rec["rid"]),
        "agent": rec.get("agent"),
        "started_at": _ts(rec.get("t0")),
        "ended_at": datetime.fromtimestamp(rec["t0"] + latency / 1000.0, UTC) if rec.get("t0") and latency else None,
        "endpoint": endpoint,
        "model": req.get("model"),
        "tools": req.get("tools"),
        "sampling": {k: v for k, v in req.items() if k not in _NOT_SAMPLING and k not in injected},
        "stream": bool(rec.get("stream")),
        "policy_version": rec.get("pv"),
        "latency_ms": latency,
        "time_to_first_token_ms": rec.get("ttft"),
        "request_id": rec["rid"],
        "metadata": metadata,
    }
    if endpoint == "chat":
        messages, unparsed = [], 0
        for m in req.get("messages") or ():
            try:
                messages.append(ChatMessage.model_validate(m))
            except ValidationError:  # e.g. a provider-specific role: keep the call, count what was left out
                unparsed += 1
        fields["request_messages"] = messages
        if unparsed:
            metadata["unparsed_messages"] = unparsed
    else:
        prompt = req.get("prompt")
        fields["prompt"] = prompt if isinstance(prompt, str) else orjson.dumps(prompt).decode() if prompt else None
    reply = rec.get("resp")
    if reply is None and rec.get("sse") is not None:
        reply = assemble_stream(rec["sse"]) if not rec.get("sse_wire") else _native_stream(rec["sse_wire"], rec["sse"])
    if isinstance(reply, dict):
        choices: list[CompletionChoice] = []
        try:
            choices = [_choice(c) for c in reply.get("choices") or () if isinstance(c, dict)]
        except (ValidationError, TypeError, ValueError) as err:
            rec.setdefault("err", {"type": "malformed_reply", "message": f"cannot parse choices: {err}"})
        fields["choices"] = choices
        fields["response_id"] = reply.get("id") if isinstance(reply.get("id"), str) else None
        fields["model"] = reply.get("model") or fields["model"]
        fields["usage"] = _usage(reply.get("usage"))
        ptids = reply.get("prompt_token_ids")
        if ptids is None and choices:
            first = (reply.get("choices") or [{}])[0]
            ptids = first.get("prompt_token_ids") if isinstance(first, dict) else None
        fields["prompt_token_ids"] = list(ptids) if isinstance(ptids, list) else None
        if reply.get("_malformed_chunks"):
            metadata["malformed_chunks"] = reply["_malformed_chunks"]
    failure = rec.get("err")
    if failure:
        fields["status"] = StepStatus.error
        fields["error"] = ErrorInfo(
            type=str(failure.get("type") or "error"),
            message=str(failure.get("message") or ""),
            status_code=failure.get("status"),
        )
    return LLMCallStep(**fields)


class Converter:
    """Turns raw records into events, remembering per trajectory which llm_call requested which tool
    call (bounded LRU; after a restart `lookup` rebuilds a trajectory's index from the store)."""

    def __init__(self, lookup: Callable[[str], list[LLMCallStep]] | None = None, max_trajectories: int = 10_000):
        self._lookup = lookup
        self._max = max_trajectories
        self._tool_index: OrderedDict[str, dict[str, tuple[str, str, str]]] = OrderedDict()
        self._seen_tools: OrderedDict[str, set[str]] = OrderedDict()

    def _index(self, trajectory_id: str) -> dict[str, tuple[str, str, str]]:
        index = self._tool_index.get(trajectory_id)
        if index is None:
            index = {}
            if self._lookup is not None:
                try:
                    for step in self._lookup(trajectory_id):
                        self._remember(index, step)
                except Exception:  # the trajectory may not exist yet; linking degrades, capture does not
                    log.debug("no stored steps for %s", trajectory_id, exc_info=True)
            self._tool_index[trajectory_id] = index
            while len(self._tool_index) > self._max:
                self._tool_index.popitem(last=False)
        else:
            self._tool_index.move_to_end(trajectory_id)
        return index

    @staticmethod
    def _remember(index: dict[str, tuple[str, str, str]], step: LLMCallStep) -> None:
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

    def convert(self, rec: dict[str, Any]) -> list[Event]:
        kind = rec.get("t")
        tid, tenant = rec["traj"], rec.get("tenant", "default")
        at = _ts(rec.get("at") or rec.get("t0"))
        if kind == "session":
            header = TrajectoryHeader(
                id=tid,
                tenant_id=tenant,
                agent=rec.get("agent") or "default",
                end_user=rec.get("end_user"),
                harness_version=rec.get("hv"),
                policy_version=rec.get("pv"),
                task_id=rec.get("task_id"),
                task_input=rec.get("task_input"),
                started_at=at,
                metadata=rec.get("metadata") or {},
            )
            return [TrajectoryStarted(event_id=f"{tid}:start", trajectory_id=tid, tenant_id=tenant, header=header)]
        if kind == "call":
            return self._call_events(rec, tid, tenant, at)
        if kind == "step":
            step = _STEP_ADAPTER.validate_python(rec["step"])
            if isinstance(step, ToolCallStep) and step.tool_call_id:
                self._seen(tid).add(step.tool_call_id)
                if step.llm_step_id is None:  # link an explicit report to the call that requested it
                    linked = self._index(tid).get(step.tool_call_id)
                    if linked is not None:
                        step.llm_step_id = step.parent_step_id = linked[0]
            return [StepAppended(event_id=f"{tid}:{step.id}", trajectory_id=tid, tenant_id=tenant, step=step)]
        if kind == "signal":
            signal = Signal.model_validate(rec["signal"])
            return [SignalAttached(event_id=f"{tid}:{signal.id}", trajectory_id=tid, tenant_id=tenant, signal=signal)]
        if kind == "end":
            events: list[Event] = []
            if rec.get("outcome") is not None:
                signal = Signal(
                    id=f"sig_outcome_{rec['id']}",
                    kind=SignalKind.outcome,
                    value=float(rec["outcome"]),
                    source=rec.get("source") or "session_end",
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
                    status=TrajectoryStatus(rec["status"]),
                    ended_at=at,
                    metadata={"end_reason": rec["reason"]} if rec.get("reason") else {},
                )
            )
            return events
        raise ValueError(f"unknown spool record type {kind!r}")

    def _call_events(self, rec: dict[str, Any], tid: str, tenant: str, at: datetime) -> list[Event]:
        step = build_llm_step(rec)
        events: list[Event] = []
        standalone = rec.get("sess") is None
        if standalone:
            header = TrajectoryHeader(
                id=tid,
                tenant_id=tenant,
                agent=rec.get("agent") or "default",
                end_user=rec.get("end_user"),
                harness_version=rec.get("hv"),
                policy_version=rec.get("pv"),
                started_at=at,
                metadata={"session": "none"},
            )
            events.append(
                TrajectoryStarted(event_id=f"{tid}:start", trajectory_id=tid, tenant_id=tenant, header=header)
            )
        else:
            index, seen = self._index(tid), self._seen(tid)
            for m in step.request_messages:
                if m.role != "tool" or not m.tool_call_id or m.tool_call_id in seen:
                    continue
                seen.add(m.tool_call_id)
                llm_id, name, arguments = index.get(m.tool_call_id, (None, m.name or "unknown", None))
                tool = ToolCallStep(
                    id=tool_step_id(tid, m.tool_call_id),
                    agent=rec.get("agent"),
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
        if standalone:
            failed = step.status == StepStatus.error
            events.append(
                TrajectoryEnded(
                    event_id=f"{tid}:end",
                    trajectory_id=tid,
                    tenant_id=tenant,
                    status=TrajectoryStatus.failed if failed else TrajectoryStatus.completed,
                    ended_at=step.ended_at or at,
                )
            )
        return events


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
