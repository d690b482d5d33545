"""Capture policy: how much of a run is kept (full | metadata | off), per tenant and per agent.

`metadata` keeps the shape of a run (steps, roles, tool names, timings, usage, statuses, signals)
and drops everything a person wrote or a model produced: message text, prompts, tool arguments
and results, task input, token ids and logprobs (token ids spell the text out). `off` drops a
run's events entirely. The same walker also writes `<REDACTION_FAILED>` markers when a redaction
stage raised, so no content survives a failure in the clear.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from evolvable.governance.redaction.validators import plainly_safe_identifier
from evolvable.protocol.models import (
    CaptureMode,
    ChatMessage,
    CompletionChoice,
    HandoffStep,
    LLMCallStep,
    MemoryOpStep,
    MessageStep,
    SignalAttached,
    SkillUseStep,
    StepAppended,
    ToolCallStep,
    TrajectoryEnded,
    TrajectoryStarted,
)

REDACTION_FAILED = "<REDACTION_FAILED>"

ContentMap = Callable[[Any], Any]
"""Maps one content value (text, JSON-able value) to what is kept in its place."""

_STRICTNESS = {CaptureMode.full: 0, CaptureMode.metadata: 1, CaptureMode.off: 2}


def strictest(modes: list[CaptureMode]) -> CaptureMode:
    """The most restrictive mode: used when a run's agent is unknown, so a policy is never loosened by accident."""
    return max(modes, key=lambda m: _STRICTNESS[m]) if modes else CaptureMode.full


def _drop(_: Any) -> Any:
    return None


def _mark(value: Any) -> Any:
    """Every string leaf becomes the marker; numbers, booleans and the shape stay."""
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, str):
        return REDACTION_FAILED
    if isinstance(value, dict):
        return {k: _mark(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_mark(v) for v in value]
    return REDACTION_FAILED


def _message(msg: ChatMessage, fn: ContentMap) -> ChatMessage:
    data = msg.model_dump()
    data["content"] = fn(msg.content)
    for call in data.get("tool_calls") or []:
        call["function"]["arguments"] = fn(call["function"]["arguments"]) or ""
        if fn is _mark:
            call["id"] = REDACTION_FAILED if _unsafe(call["id"]) else call["id"]
            call["function"]["name"] = (
                REDACTION_FAILED if _unsafe(call["function"]["name"]) else call["function"]["name"]
            )
    if fn is _mark and _unsafe(data.get("tool_call_id")):
        data["tool_call_id"] = REDACTION_FAILED
    # Extra provider fields (reasoning_content, refusal, audio, ...) are content too.
    for key in list(data):
        if key not in {"role", "content", "name", "tool_calls", "tool_call_id"}:
            data[key] = fn(data[key])
    return ChatMessage.model_validate(data)


def _choice(choice: CompletionChoice, fn: ContentMap) -> CompletionChoice:
    return choice.model_copy(
        update={
            "message": _message(choice.message, fn) if choice.message is not None else None,
            "text": fn(choice.text),
            "completion_token_ids": None,
            "logprobs": None,
            "redacted_token_spans": None,
        }
    )


# Client-named identifiers: kept in `metadata` mode (they are the run's shape), marked when redaction failed.
_IDENTIFIERS: dict[type, tuple[str, ...]] = {
    LLMCallStep: ("agent", "model", "response_id"),
    ToolCallStep: ("agent", "tool_name", "tool_call_id", "error_class"),
    MessageStep: ("agent",),
    HandoffStep: ("agent", "from_agent", "to_agent"),
    MemoryOpStep: ("agent", "store"),
    SkillUseStep: ("agent", "skill_name", "skill_version"),
}


def _unsafe(value: Any) -> bool:
    return isinstance(value, str) and not plainly_safe_identifier(value)


def _mark_identifiers(model: Any, names: tuple[str, ...]) -> Any:
    """`model` with its non-empty string fields `names` replaced by the marker."""
    update = {n: REDACTION_FAILED for n in names if _unsafe(getattr(model, n, None))}
    return model.model_copy(update=update) if update else model


def _step(step: Any, fn: ContentMap, *, metadata_fn: ContentMap) -> Any:
    mapped = _step_content(step, fn, metadata_fn=metadata_fn)
    return _mark_identifiers(mapped, _IDENTIFIERS.get(type(step), ())) if fn is _mark else mapped


def _step_content(step: Any, fn: ContentMap, *, metadata_fn: ContentMap) -> Any:
    meta = metadata_fn(step.metadata)
    if isinstance(step, LLMCallStep):
        error = step.error.model_copy(update={"message": fn(step.error.message) or ""}) if step.error else None
        return step.model_copy(
            update={
                "request_messages": [_message(m, fn) for m in step.request_messages],
                "prompt": fn(step.prompt),
                "tools": fn(step.tools) if fn is _mark else step.tools,
                "choices": [_choice(c, fn) for c in step.choices],
                "prompt_token_ids": None,
                "error": error,
                "metadata": meta,
            }
        )
    if isinstance(step, ToolCallStep):
        return step.model_copy(
            update={
                "arguments": fn(step.arguments),
                "result": fn(step.result),
                "error_message": fn(step.error_message),
                "metadata": meta,
            }
        )
    if isinstance(step, MessageStep):
        return step.model_copy(update={"content": fn(step.content), "metadata": meta})
    if isinstance(step, HandoffStep):
        return step.model_copy(update={"input": fn(step.input), "reason": fn(step.reason), "metadata": meta})
    if isinstance(step, MemoryOpStep):
        return step.model_copy(update={"items": fn(step.items) or [], "key": fn(step.key), "metadata": meta})
    if isinstance(step, SkillUseStep):
        return step.model_copy(update={"input": fn(step.input), "output": fn(step.output), "metadata": meta})
    return step


def _map_event(event: Any, fn: ContentMap, *, metadata_fn: ContentMap, capture: CaptureMode | None) -> Any:
    if isinstance(event, TrajectoryStarted):
        update: dict[str, Any] = {
            "task_input": fn(event.header.task_input),
            "metadata": metadata_fn(event.header.metadata),
        }
        if capture is not None:
            update["capture"] = capture
        header = event.header.model_copy(update=update)
        if fn is _mark:
            header = _mark_identifiers(header, ("agent", "task_id"))
        return event.model_copy(update={"header": header})
    if isinstance(event, StepAppended):
        return event.model_copy(update={"step": _step(event.step, fn, metadata_fn=metadata_fn)})
    if isinstance(event, SignalAttached):
        signal = event.signal.model_copy(update={"metadata": metadata_fn(event.signal.metadata)})
        if fn is _mark:
            signal = _mark_identifiers(signal, ("source", "label"))
        return event.model_copy(update={"signal": signal})
    if isinstance(event, TrajectoryEnded):
        return event.model_copy(update={"metadata": metadata_fn(event.metadata)})
    return event


def _keep(value: Any) -> Any:
    return value


def strip_content(event: Any) -> Any:
    """The `metadata` capture mode: structure, timings, usage and signals stay; content goes.

    Metadata dicts stay (they carry routing facts such as intent and split); the redactor still runs on them."""
    return _map_event(event, _drop, metadata_fn=_keep, capture=CaptureMode.metadata)


def mark_redaction_failed(event: Any) -> Any:
    """Replace every piece of text in the event, metadata included, by the `<REDACTION_FAILED>` marker."""
    return _map_event(event, _mark, metadata_fn=lambda m: _mark(m) or {}, capture=None)


def drop_token_ids(event: Any, reason: str = "redaction") -> Any:
    """Remove engine token ids and logprobs from an llm_call step; they encode the text they were produced from."""
    if isinstance(event, StepAppended) and isinstance(event.step, LLMCallStep):
        step = event.step
        cleared = {"completion_token_ids": None, "logprobs": None, "redacted_token_spans": None}
        choices = [c.model_copy(update=cleared) for c in step.choices]
        meta = {**step.metadata, "token_ids_dropped": reason}
        meta.pop("token_ids_redacted", None)
        return event.model_copy(
            update={"step": step.model_copy(update={"prompt_token_ids": None, "choices": choices, "metadata": meta})}
        )
    return event
