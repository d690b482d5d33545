"""Redaction of ATDP events, for the proxy's background writer (spool -> governance -> store).

Only free-form content is redacted: message contents (plain and multi-part), tool-call arguments (JSON kept
valid), tool results, prompts, tool definitions, task input, metadata values, signal labels and metadata.
Structural fields (ids, kinds, roles, model names, versions, timestamps, the end-user id used for purges)
are left alone so the trajectory still links up and can be erased on request.

Token ids: when redaction changed any text of an llm_call step, its prompt_token_ids, completion_token_ids and
logprobs would no longer decode to the stored text, and keeping them would keep the secret (token ids decode
back to it). With a tokenizer for the call's model (a TokenizerRegistry), the ids are redacted too: the same
engine and placeholder map run over the decoded tokens and the tokens that overlap a finding are replaced by
the tokenized placeholder (see token_ids.py); `metadata["token_ids_redacted"]` counts the replaced ranges.
Without a tokenizer, or when the rewritten ids would not decode to exactly the stored text, they are dropped
and `metadata["token_ids_dropped"]` says why ("redaction": no tokenizer; "redaction_mismatch"; "redaction_error").
Steps without findings keep their ids untouched.

Placeholders are consistent per trajectory across writer batches: one PlaceholderMap per trajectory id lives
in a bounded LRU in memory and is never persisted.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Final

from evolvable.errors import RedactionFailed
from evolvable.governance.redaction.engine import (
    FAILED_MARKER,
    PlaceholderMap,
    RedactionEngine,
    default_engine,
    redaction_counts,
)
from evolvable.governance.redaction.token_ids import TokenIdsMismatch, redact_step_token_ids
from evolvable.governance.redaction.tokenizer_registry import TokenizerRegistry
from evolvable.governance.redaction.validators import plainly_safe_identifier
from evolvable.protocol.models import (
    ChatMessage,
    CompletionChoice,
    ErrorInfo,
    FunctionCall,
    LLMCallStep,
    SignalAttached,
    StepAppended,
    ToolCall,
    Trajectory,
    TrajectoryEnded,
    TrajectoryHeader,
    TrajectoryStarted,
    VersionsNamed,
)
from evolvable.store.documents import RunDocuments

log = logging.getLogger("evolvable.governance.redaction")

# Every event kind (`VersionsNamed` carries version ids only: it passes through unchanged).
AnyEvent = TrajectoryStarted | StepAppended | SignalAttached | TrajectoryEnded | VersionsNamed

_FREE_FORM_STEP_FIELDS = {
    "tool_call": ("arguments", "result", "error_message"),
    "message": ("content",),
    "handoff": ("reason", "input"),
    "memory_op": ("key", "items"),
    "skill_use": ("input", "output"),
}

# Identifiers a client (or an upstream) names freely: the engine runs over them too, so an agent called after a
# customer's email or a tool-call id holding a phone number is stored as placeholders. Ids without findings (all
# ordinary ones) are kept byte for byte, and the per-trajectory map keeps linked ids (a tool step's tool_call_id
# and the llm_call's tool_calls[].id) equal after redaction.
_IDENTIFIER_STEP_FIELDS = {
    "tool_call": ("tool_name", "tool_call_id", "error_class"),
    "handoff": ("from_agent", "to_agent"),
    "memory_op": ("store",),
    "skill_use": ("skill_name", "skill_version"),
}
_IDENTIFIER_HEADER_FIELDS = ("agent", "task_id")


class EventRedactor:
    """Redacts batches of events with per-trajectory placeholder maps (bounded LRU, memory only).

    `tokenizers` lets it redact the token ids of llm_calls whose text changed instead of dropping them."""

    rewrites_token_ids = True
    """It drops or rewrites the ids of every llm_call whose text it changed, so the Governor need not."""

    def __init__(
        self,
        engine: RedactionEngine | None = None,
        *,
        max_trajectories: int = 10_000,
        tokenizers: TokenizerRegistry | None = None,
        walk_models: bool = True,
    ) -> None:
        self.engine = engine or default_engine()
        self.walk_models = walk_models
        """Read llm_calls and headers from their models, dumping them only when something changes (`_walked`);
        False dumps every event first (the reference the model walk is tested against)."""
        self.max_trajectories = max_trajectories
        self.tokenizers = tokenizers
        self._maps: OrderedDict[str, PlaceholderMap] = OrderedDict()
        self._lock = threading.Lock()

    # ----------------------------------------------------------------- public API

    def redact_events(self, events: Sequence[AnyEvent]) -> list[AnyEvent]:
        """Returns redacted copies in the same order. Fails closed per event: content that cannot be redacted is
        replaced by `<REDACTION_FAILED>` (and the engine's failure hook is called); nothing passes through raw.
        Raises RedactionFailed only if an event can be neither redacted nor scrubbed (the caller drops it)."""
        try:
            return [self._redact_event(event) for event in events]
        finally:
            redaction_counts.flush()  # the writer exports its metrics after each batch

    def redact_trajectory(self, trajectory: Trajectory, placeholders: PlaceholderMap | None = None) -> Trajectory:
        """Redacts a whole trajectory (imports, re-redaction of stored data) with one placeholder map."""
        r = _EngineRedactor(
            self.engine, placeholders if placeholders is not None else PlaceholderMap(), self.tokenizers
        )
        data = trajectory.model_dump()
        _header(data, r)
        for step in data["steps"]:
            _step(step, r)
        for signal in data["signals"]:
            _signal(signal, r)
        return Trajectory.model_validate(data)

    def redact_identifiers(self, trajectory_id: str, identifiers: dict[str, str | None]) -> dict[str, str | None]:
        """Redacts identifiers stored outside events (the `proxy_sessions` row's agent and task id) with the
        trajectory's map, as the same fields of its header are; fails closed to the marker like `_Scrubber`."""
        data: dict[str, Any] = dict(identifiers)
        try:
            _identifiers(data, tuple(data), _EngineRedactor(self.engine, self.placeholders_for(trajectory_id)))
        except Exception as err:
            self.engine.report_failure("identifier", err)
            data = dict(identifiers)
            _identifiers(data, tuple(data), _Scrubber())
        return data

    def redact_run(self, run: RunDocuments) -> None:
        """Redacts a finished run given as documents (`store.RunDocuments`), in place: the same engine calls, in the
        same order and with the trajectory's same placeholder map, as `redact_events` makes on its start and step
        events (tested against them). Raises where that would fail closed: the caller then takes those events."""
        placeholders = self.placeholders_for(run.trajectory_id)
        _header(run.header, _EngineRedactor(self.engine, placeholders, self.tokenizers))
        for step in run.steps:
            _step(step, _EngineRedactor(self.engine, placeholders, self.tokenizers))

    def placeholders_for(self, trajectory_id: str) -> PlaceholderMap:
        with self._lock:
            found = self._maps.get(trajectory_id)
            if found is None:
                found = self._maps[trajectory_id] = PlaceholderMap()
                while len(self._maps) > self.max_trajectories:
                    self._maps.popitem(last=False)
            else:
                self._maps.move_to_end(trajectory_id)
            return found

    def forget(self, trajectory_id: str) -> None:
        with self._lock:
            self._maps.pop(trajectory_id, None)

    # ----------------------------------------------------------------- events

    def _redact_event(self, event: AnyEvent) -> AnyEvent:
        placeholders = self.placeholders_for(event.trajectory_id)
        try:
            return _apply(event, _EngineRedactor(self.engine, placeholders, self.tokenizers), self.walk_models)
        except Exception as err:
            self.engine.report_failure("event", err)
        try:  # fail closed: every free-form string becomes the marker
            return _apply(event, _Scrubber())
        except Exception as err:
            self.engine.report_failure("event", err)
            raise RedactionFailed(f"event {event.event_id} can be neither redacted nor scrubbed") from err


def _apply(event: AnyEvent, r: _Redactor, walk_models: bool = False) -> AnyEvent:
    """`event` redacted by `r`: the very event when nothing changed (it is stored as it came, without validating
    a copy of it again: a quarter of the writer's CPU per call once went to that), else a validated copy. With
    `walk_models`, llm_calls and headers are read from their models (`_walked`); otherwise only the part that
    holds free-form values is dumped to a dict and walked (ids and timestamps around it are not)."""
    if isinstance(event, TrajectoryEnded):
        if not event.metadata:
            return event  # its only free-form field is empty
        data = event.model_dump()
        data["metadata"], _ = r.value(data["metadata"])
        return type(event).model_validate(data) if r.changed else event
    if walk_models and isinstance(r, _EngineRedactor) and (walked := _walked(event, r)) is not _NOT_WALKED:
        return event if walked is None else type(event).model_validate({**event.__dict__, **walked})
    part: dict[str, Any]
    if isinstance(event, StepAppended):
        name, step = "step", event.step
        if isinstance(step, LLMCallStep) and _has_token_ids(step):
            # Token ids are numbers, never text to redact: they join the dict only if the step changes (with
            # 2,000 + 300 token ids per call, governing took 2.3x less CPU: capture_cpu.py --tokens, session 8)
            part = step.model_dump(exclude=_TOKEN_ID_LISTS)
            _step(part, r, step)
            if r.changed:
                _restore_token_ids(part, step)
        else:
            part = step.model_dump()
            _step(part, r)
    elif isinstance(event, TrajectoryStarted):
        name, part = "header", event.header.model_dump()
        _header(part, r)
    elif isinstance(event, SignalAttached):
        name, part = "signal", event.signal.model_dump()
        _signal(part, r)
    else:
        return event  # (versions_named: version ids only)
    if not r.changed:
        return event
    return type(event).model_validate({**event.__dict__, name: part})


def _has_token_ids(step: LLMCallStep) -> bool:
    return step.prompt_token_ids is not None or any(
        c.completion_token_ids is not None or c.logprobs is not None for c in step.choices
    )


# ----------------------------------------------------------------- walks over the models (no dump)

_NOT_WALKED: Final = object()
"""What `_walked` returns for an event it does not walk: the dict walk below takes it."""

_Path = tuple[str | int, ...]


def _walked(event: AnyEvent, r: _EngineRedactor) -> Any:
    """An llm_call step or a trajectory header redacted by reading the models' fields, without dumping them first:
    None when nothing changed (the usual case, where the dump was a third of redaction's CPU), else the event's
    changed part as a dict (`{"step": ...}` or `{"header": ...}`), dumped once and edited; `_NOT_WALKED` for any
    other event, or one holding a value the dump would turn into something else (a model or a tuple in a free-form
    field), which the dict walk takes. It calls the engine on the same values, in the same order, as `_step` and
    `_header` do on the dump, so placeholders, token ids and counts come out the same (tested against them)."""
    if isinstance(event, StepAppended):
        step = event.step
        if type(step) is LLMCallStep and _plain_llm_call(step):
            data = _walk_llm_call(step, r)
            return None if data is None else {"step": data}
    elif isinstance(event, TrajectoryStarted):
        header = event.header
        if type(header) is TrajectoryHeader and _plain(header.task_input) and _plain(header.metadata):
            data = _walk_header(header, r)
            return None if data is None else {"header": data}
    return _NOT_WALKED


class _Edits:
    """The replacements a walk over a model found, applied to its dump only if there are any."""

    __slots__ = ("redactor", "replaced")

    def __init__(self, redactor: _Redactor, replaced: list[tuple[_Path, Any]] | None = None) -> None:
        """`replaced`: another walk's list, to share one order with it (an llm_call's own redactor)."""
        self.redactor = redactor
        self.replaced: list[tuple[_Path, Any]] = replaced if replaced is not None else []

    def text(self, path: _Path, value: str) -> bool:
        return self._kept(path, value, *self.redactor.text(value))

    def identifier(self, path: _Path, value: str | None) -> bool:
        if not isinstance(value, str) or not value:
            return False
        return self._kept(path, value, *self.redactor.identifier(value))

    def value(self, path: _Path, value: Any) -> bool:
        return self._kept(path, value, *self.redactor.value(value))

    def _kept(self, path: _Path, value: Any, new: Any, changed: bool) -> bool:
        """Remembers `new` at `path` unless it is `value` unchanged; returns the redactor's `changed`, as the dict
        walk uses it. (A JSON text walked and written again counts as unchanged but differs: it is kept too.)"""
        if changed or new != value:
            self.replaced.append((path, new))
        return changed

    def applied(self, data: dict[str, Any]) -> dict[str, Any]:
        for path, new in self.replaced:
            target: Any = data
            for key in path[:-1]:
                target = target[key]
            target[path[-1]] = new
        return data


def _walk_llm_call(step: LLMCallStep, r: _EngineRedactor) -> dict[str, Any] | None:
    """`_step` on an llm_call, read from the model (see `_walked`)."""
    edits = _Edits(r)
    edits.value(("metadata",), step.metadata)
    edits.identifier(("agent",), step.agent)
    llm = r.for_llm_call()
    in_call = _Edits(llm, edits.replaced)  # one list, in the order the dict walk makes them
    changed = False
    for i, message in enumerate(step.request_messages):
        changed |= _walk_message(in_call, ("request_messages", i), message)
    if step.prompt:
        changed |= in_call.text(("prompt",), step.prompt)
    if step.tools:
        changed |= in_call.value(("tools",), step.tools)
    changed |= in_call.value(("sampling",), step.sampling)
    for i, choice in enumerate(step.choices):
        if choice.message is not None:
            changed |= _walk_message(in_call, ("choices", i, "message"), choice.message)
        if choice.text:
            changed |= in_call.text(("choices", i, "text"), choice.text)
    error = step.error
    if error is not None and error.message:
        in_call.text(("error", "message"), error.message)
    if error is not None:
        in_call.identifier(("error", "type"), error.type)
    in_call.identifier(("response_id",), step.response_id)
    if not changed and not edits.replaced:  # then the token ids stay as they are, and only the model is left
        in_call.identifier(("model",), step.model)
        return edits.applied(step.model_dump()) if edits.replaced else None
    data = edits.applied(step.model_dump())
    _llm_call_token_ids(data, llm, changed)
    _identifiers(data, ("model",), llm)  # after the token ids, as in `_llm_call`
    return data


def _walk_message(edits: _Edits, path: _Path, message: ChatMessage) -> bool:
    """`_message` on a message model: its fields in the dump's order (declared, then extra)."""
    changed = False
    fields = message.__dict__
    extra = message.__pydantic_extra__
    for key in (*_MESSAGE_FIELDS, *(extra or ())):
        value = fields[key] if key in fields else extra[key] if extra is not None else None
        if key == "role" or value is None:
            continue
        if key == "tool_call_id":
            changed |= edits.identifier((*path, key), value)
            continue
        if key == "tool_calls":
            for j, call in enumerate(value):
                changed |= edits.identifier((*path, key, j, "id"), call.id)
                changed |= edits.identifier((*path, key, j, "function", "name"), call.function.name)
                arguments = call.function.arguments
                if isinstance(arguments, str) and arguments:
                    changed |= edits.text((*path, key, j, "function", "arguments"), arguments)
            continue
        changed |= edits.text((*path, key), value) if isinstance(value, str) else edits.value((*path, key), value)
    return changed


_MESSAGE_FIELDS: Final = tuple(ChatMessage.model_fields)


def _walk_header(header: TrajectoryHeader, r: _EngineRedactor) -> dict[str, Any] | None:
    """`_header`, read from the model (see `_walked`)."""
    edits = _Edits(r)
    edits.value(("task_input",), header.task_input)
    edits.value(("metadata",), header.metadata or {})
    for name in _IDENTIFIER_HEADER_FIELDS:
        edits.identifier((name,), getattr(header, name))
    return edits.applied(header.model_dump()) if edits.replaced else None


def _plain_llm_call(step: LLMCallStep) -> bool:
    """Whether every free-form value of the step is what its dump holds too (plain JSON types, our own models)."""
    if not (_plain(step.metadata) and _plain(step.sampling) and _plain(step.tools)):
        return False
    if not all(_plain_message(m) for m in step.request_messages):
        return False
    for choice in step.choices:
        if type(choice) is not CompletionChoice or (choice.message is not None and not _plain_message(choice.message)):
            return False
    return step.error is None or type(step.error) is ErrorInfo


def _plain_message(message: ChatMessage) -> bool:
    if type(message) is not ChatMessage or not _plain(message.content):
        return False
    if message.__pydantic_extra__ and not _plain(message.__pydantic_extra__):
        return False
    for call in message.tool_calls or ():
        if type(call) is not ToolCall or type(call.function) is not FunctionCall:
            return False
    return True


def _plain(value: Any) -> bool:
    """JSON types only (str keys), which a dump copies as they are."""
    kind = type(value)
    if kind is str or kind is int or kind is float or kind is bool or value is None:
        return True
    if kind is dict:
        return all(type(k) is str and _plain(v) for k, v in value.items())
    if kind is list:
        return all(_plain(v) for v in value)
    return False


def _header(header: dict[str, Any], r: _Redactor) -> None:
    header["task_input"], _ = r.value(header.get("task_input"))
    header["metadata"], _ = r.value(header.get("metadata") or {})
    _identifiers(header, _IDENTIFIER_HEADER_FIELDS, r)


def _signal(signal: dict[str, Any], r: _Redactor) -> None:
    if signal.get("label"):
        signal["label"], _ = r.text(signal["label"])
    signal["metadata"], _ = r.value(signal.get("metadata") or {})
    _identifiers(signal, ("source",), r)


def _identifiers(data: dict[str, Any], names: tuple[str, ...], r: _Redactor) -> bool:
    """Redacts the string fields `names` of `data` in place; True if any changed."""
    changed = False
    for name in names:
        value = data.get(name)
        if isinstance(value, str) and value:
            data[name], c = r.identifier(value)
            changed |= c
    return changed


def _step(step: dict[str, Any], r: _Redactor, token_ids: LLMCallStep | None = None) -> None:
    """`token_ids`: the llm_call whose dump `step` is, when the dump left its token ids out (`_TOKEN_ID_LISTS`)."""
    step["metadata"], _ = r.value(step.get("metadata") or {})
    _identifiers(step, ("agent",), r)
    kind = step["kind"]
    if kind == "llm_call":
        _llm_call(step, r, token_ids)
        return
    for name in _FREE_FORM_STEP_FIELDS.get(kind, ()):
        value = step.get(name)
        if value is not None:
            step[name], _ = r.text(value) if isinstance(value, str) else r.value(value)
    _identifiers(step, _IDENTIFIER_STEP_FIELDS.get(kind, ()), r)


def _llm_call(step: dict[str, Any], r: _Redactor, token_ids: LLMCallStep | None = None) -> None:
    r = r.for_llm_call()
    changed = False
    for message in step.get("request_messages") or []:
        changed |= _message(message, r)
    if step.get("prompt"):
        step["prompt"], c = r.text(step["prompt"])
        changed |= c
    if step.get("tools"):
        step["tools"], c = r.value(step["tools"])
        changed |= c
    step["sampling"], c = r.value(step.get("sampling") or {})
    changed |= c
    for choice in step.get("choices") or []:
        if choice.get("message"):
            changed |= _message(choice["message"], r)
        if choice.get("text"):
            choice["text"], c = r.text(choice["text"])
            changed |= c
    if step.get("error") and step["error"].get("message"):
        step["error"]["message"], _ = r.text(step["error"]["message"])
    if step.get("error"):
        _identifiers(step["error"], ("type",), r)
    _identifiers(step, ("response_id",), r)
    if changed and token_ids is not None:
        _restore_token_ids(step, token_ids)
    _llm_call_token_ids(step, r, changed)
    _identifiers(step, ("model",), r)  # after the token ids: their tokenizer is looked up by the raw model name


_TOKEN_ID_LISTS: dict[str, Any] = {
    "prompt_token_ids": True,
    "choices": {"__all__": {"completion_token_ids", "logprobs"}},
}
"""What `_apply` leaves out of the dump of an llm_call that has token ids."""


def _restore_token_ids(step: dict[str, Any], source: LLMCallStep) -> None:
    """Puts the token ids `_TOKEN_ID_LISTS` left out of `step` back, as copies (token-id redaction edits them in
    place); a no-op for those already there."""
    if "prompt_token_ids" not in step:
        ids = source.prompt_token_ids
        step["prompt_token_ids"] = list(ids) if ids is not None else None
    for choice, model in zip(step.get("choices") or (), source.choices, strict=True):
        for name in ("completion_token_ids", "logprobs"):
            if name not in choice:
                values = getattr(model, name)
                choice[name] = list(values) if values is not None else None


def _llm_call_token_ids(step: dict[str, Any], r: _Redactor, changed: bool) -> None:
    """Redacts (or drops) the token ids of an llm_call whose text redaction `changed`."""
    if not changed:
        return
    had_ids = step.get("prompt_token_ids") is not None or any(
        ch.get("completion_token_ids") is not None or ch.get("logprobs") is not None for ch in step.get("choices") or []
    )
    if not had_ids:
        return
    reason = r.token_ids(step)
    if reason is None:
        return
    step["prompt_token_ids"] = None
    for choice in step.get("choices") or []:
        choice["completion_token_ids"] = None
        choice["logprobs"] = None
        choice["redacted_token_spans"] = None
    step["metadata"]["token_ids_dropped"] = reason
    step["metadata"].pop("token_ids_redacted", None)


def _message(message: dict[str, Any], r: _Redactor) -> bool:
    changed = False
    for key, value in list(message.items()):
        if key == "role" or value is None:
            continue
        if key == "tool_call_id":
            changed |= _identifiers(message, ("tool_call_id",), r)
            continue
        if key == "tool_calls":
            for call in value:
                changed |= _identifiers(call, ("id",), r)
                function = call.get("function") or {}
                changed |= _identifiers(function, ("name",), r)
                if isinstance(function.get("arguments"), str) and function["arguments"]:
                    function["arguments"], c = r.text(function["arguments"])
                    changed |= c
            continue
        message[key], c = r.text(value) if isinstance(value, str) else r.value(value)
        changed |= c
    return changed


class _Redactor:
    changed = True
    """Whether any value was replaced; only `_EngineRedactor` tracks it (the scrubber always replaces)."""

    def text(self, text: str) -> tuple[str, bool]:
        raise NotImplementedError

    def identifier(self, text: str) -> tuple[str, bool]:
        return self.text(text)

    def value(self, value: Any) -> tuple[Any, bool]:
        raise NotImplementedError

    def for_llm_call(self) -> _Redactor:
        return self

    def token_ids(self, step: dict[str, Any]) -> str | None:
        """Redacts the (changed) step's token ids in place; returns why they must be dropped instead, or None."""
        return "redaction"


class _EngineRedactor(_Redactor):
    def __init__(
        self, engine: RedactionEngine, placeholders: PlaceholderMap, tokenizers: TokenizerRegistry | None = None
    ) -> None:
        self.engine, self.placeholders, self.tokenizers = engine, placeholders, tokenizers
        self.changed = False
        self._parent: _EngineRedactor | None = None

    def _replaced(self) -> None:
        self.changed = True
        if self._parent is not None:
            self._parent._replaced()

    def for_llm_call(self) -> _EngineRedactor:
        """A redactor for one llm_call that remembers the values it replaced, to check its token ids against."""
        if not self.tokenizers:
            return self
        child = _EngineRedactor(self.engine, _RecordingPlaceholders(self.placeholders), self.tokenizers)
        child._parent = self
        return child

    def token_ids(self, step: dict[str, Any]) -> str | None:
        codec = self.tokenizers.codec_for(step.get("model")) if self.tokenizers else None
        if codec is None or not isinstance(self.placeholders, _RecordingPlaceholders):
            return "redaction"
        try:
            replaced = redact_step_token_ids(step, codec, self.engine, self.placeholders, self.placeholders.values)
        except TokenIdsMismatch as err:
            log.info("token ids of llm_call %s dropped: %s", step.get("id"), err)
            return "redaction_mismatch"
        except Exception:  # a bug here costs the ids, never the event (nor a leak)
            log.exception("token-id redaction of llm_call %s failed; its ids are dropped", step.get("id"))
            return "redaction_error"
        earlier = step["metadata"].get("token_ids_redacted")  # re-redaction of stored data adds to it
        step["metadata"]["token_ids_redacted"] = replaced + (earlier if type(earlier) is int else 0)
        return None

    def text(self, text: str) -> tuple[str, bool]:
        stripped = text.lstrip()
        if stripped[:1] in ("{", "[") and text.rstrip()[-1:] in ("}", "]"):
            result = self.engine.redact_json_text(text, self.placeholders)
        else:
            result = self.engine.redact(text, self.placeholders)
        if result.changed:
            self._replaced()
        return result.text, result.changed

    def value(self, value: Any) -> tuple[Any, bool]:
        redacted, changed = self.engine.redact_value(value, self.placeholders)
        if changed:
            self._replaced()
        return redacted, changed


class _RecordingPlaceholders(PlaceholderMap):
    """The trajectory's map, plus the raw values replaced through it during one llm_call (memory only).

    Delegates to the wrapped map (its own slots stay unused), so placeholders stay trajectory-consistent."""

    __slots__ = ("_inner", "values")

    def __init__(self, inner: PlaceholderMap) -> None:
        self._inner = inner
        self.values: set[str] = set()

    def placeholder(self, kind: str, value: str) -> str:
        self.values.add(value)
        return self._inner.placeholder(kind, value)

    def __len__(self) -> int:
        return len(self._inner)


class _Scrubber(_Redactor):
    """The fail-closed fallback: every string becomes the marker, every structure is kept."""

    def text(self, text: str) -> tuple[str, bool]:
        return FAILED_MARKER, True

    def identifier(self, text: str) -> tuple[str, bool]:
        return (text, False) if plainly_safe_identifier(text) else (FAILED_MARKER, True)

    def value(self, value: Any) -> tuple[Any, bool]:
        if isinstance(value, str):
            return FAILED_MARKER, True
        if isinstance(value, dict):
            return {k: self.value(v)[0] for k, v in value.items()}, True
        if isinstance(value, list | tuple):
            return [self.value(v)[0] for v in value], True
        return value, False


__all__ = ["EventRedactor"]
