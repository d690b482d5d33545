"""A model call without a session, as the documents the store keeps, without building ATDP models.

Most captured calls are runs of one call. For them the writer used to validate an `LLMCallStep` and a header
from the record, wrap both in events, have the governor walk and the store dump them again: pydantic and the
layers around it were about half of the writer's CPU per call, which competes with the request path for the
machine's cores (`benchmarks/writer_floor.py`, docs/PERFORMANCE.md). Here the same step and header are built as
the dicts their models dump to: every value is checked against the field's type on the way, and a record
holding anything the models would coerce, reject or reshape (a number where a string goes, an unknown role, a
negative count, an error, a session, a native stream, ...) gets None: the writer converts it as before. What
comes out for the rest equals `Converter.convert`'s events dumped (tests/proxy/test_call_documents.py compares
them on generated records).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, get_args

from evolvable.protocol.models import SCHEMA_VERSION, ChatMessage, RunCapture, TrajectoryStatus
from evolvable.proxy.capture import _NOT_SAMPLING, _token_logprobs, assemble_stream, llm_step_id
from evolvable.proxy.records import AnyRecord, CallRecord
from evolvable.store import RunDocuments

_ROLES = frozenset(get_args(ChatMessage.model_fields["role"].annotation))
_MESSAGE_FIELDS = ("role", "content", "name", "tool_calls", "tool_call_id")


class _NotPlain(Exception):
    """The record holds something only the models' validation handles: it takes the events' path."""


def call_documents(rec: AnyRecord) -> RunDocuments | None:
    """The run of a call without a session as documents, or None where `Converter.convert` must make its events."""
    if type(rec) is not CallRecord or rec.session_id is not None or rec.error or rec.sse_wire is not None:
        return None
    started = rec.started
    if rec.endpoint != "chat" or not started:
        return None
    try:
        step = _llm_call(rec, started)
    except (_NotPlain, TypeError, ValueError, KeyError, AttributeError):
        return None
    header = _header(rec, rec.at or started, step)
    # (A record from before records named their run: the governor goes by the start event in its batch, this header.)
    run = rec.run() or RunCapture(header["agent"], rec.capture)
    return RunDocuments(header=header, steps=[step], run=run)


def _llm_call(rec: CallRecord, started: float) -> dict[str, Any]:
    """The `LLMCallStep` `capture.build_llm_step` makes of the record (`started`: its start, never 0), as its
    `model_dump()`."""
    req = rec.request
    reply = rec.reply
    if reply is None and rec.sse is not None:
        reply = assemble_stream(rec.sse)
    if not isinstance(reply, dict):
        raise _NotPlain
    latency, ttft = rec.latency_ms, rec.ttft_ms
    _check_non_negative(latency)
    _check_non_negative(ttft)
    injected = set(rec.injected)
    metadata: dict[str, Any] = {k: v for k, v in (("upstream", rec.upstream), ("client_model", rec.client_model)) if v}
    if rec.wire:
        metadata["wire"] = rec.wire
    if rec.sub_agent and rec.harness_version:
        metadata["harness_version"] = rec.harness_version
    choices = [_choice(c) for c in reply.get("choices") or () if isinstance(c, dict)]
    model = reply.get("model") or req.get("model")
    usage = _usage(reply.get("usage"))
    if reply.get("_malformed_chunks"):
        metadata["malformed_chunks"] = reply["_malformed_chunks"]
    step: dict[str, Any] = {
        "id": llm_step_id(rec.request_id),
        "agent": _optional_str(rec.agent),
        "parent_step_id": None,
        "started_at": datetime.fromtimestamp(started, UTC),
        "ended_at": datetime.fromtimestamp(started + latency / 1000.0, UTC) if latency else None,
        "metadata": metadata,
        "kind": "llm_call",
        "endpoint": "chat",
        "model": _optional_str(model),
        "request_messages": [_message(m) for m in _list(req.get("messages") or [])],
        "prompt": None,
        "tools": _tools(req.get("tools")),
        "sampling": {k: v for k, v in req.items() if k not in _NOT_SAMPLING and k not in injected},
        "stream": rec.stream,
        "choices": choices,
        "prompt_token_ids": _prompt_token_ids(reply, choices),
        "policy_version": rec.policy_version,
        "usage": usage,
        "latency_ms": latency,
        "time_to_first_token_ms": ttft,
        "request_id": rec.request_id,
        "response_id": reply.get("id") if isinstance(reply.get("id"), str) else None,
        "status": "ok",
        "error": None,
    }
    return step


def _header(rec: CallRecord, started_at: float, step: dict[str, Any]) -> dict[str, Any]:
    """The `TrajectoryHeader` of the run, as `records.run_started` makes it for a call without a session
    (`started_at`: the record's time, never 0)."""
    return {
        "schema_version": SCHEMA_VERSION,
        "id": rec.trajectory_id,
        "tenant_id": rec.tenant_id,
        "agent": rec.agent or "default",
        "end_user": rec.end_user,
        "harness_version": rec.harness_version,
        "policy_version": rec.policy_version,
        "task_id": None,
        "task_input": None,
        "status": TrajectoryStatus.completed,
        "capture": rec.capture,
        "started_at": datetime.fromtimestamp(started_at, UTC),
        "ended_at": step["ended_at"] or datetime.fromtimestamp(started_at, UTC),
        "metadata": {"session": "none"},
    }


def _message(raw: Any) -> dict[str, Any]:
    """A `ChatMessage`'s dump: its declared fields, then the extra ones in their order."""
    if type(raw) is not dict or raw.get("role") not in _ROLES or type(raw["role"]) is not str:
        raise _NotPlain
    content = raw.get("content")
    if not (content is None or type(content) is str or _list_of_dicts(content)):
        raise _NotPlain
    calls = raw.get("tool_calls")
    message = {
        "role": raw["role"],
        "content": [dict(part) for part in content] if type(content) is list else content,
        "name": _optional_str(raw.get("name")),
        "tool_calls": None if calls is None else [_tool_call(c) for c in _list(calls)],
        "tool_call_id": _optional_str(raw.get("tool_call_id")),
    }
    message.update((k, v) for k, v in raw.items() if k not in _MESSAGE_FIELDS)
    return message


def _tool_call(raw: Any) -> dict[str, Any]:
    """A `ToolCall`'s dump (id, type, function, extras), its `FunctionCall` likewise."""
    if type(raw) is not dict or type(raw.get("id")) is not str or type(raw.get("type", "function")) is not str:
        raise _NotPlain
    fn = raw.get("function")
    if type(fn) is not dict or type(fn.get("name")) is not str or type(fn.get("arguments", "")) is not str:
        raise _NotPlain
    function = {"name": fn["name"], "arguments": fn.get("arguments", "")}
    function.update((k, v) for k, v in fn.items() if k not in function)
    call = {"id": raw["id"], "type": raw.get("type", "function"), "function": function}
    call.update((k, v) for k, v in raw.items() if k not in call)
    return call


def _choice(raw: dict[str, Any]) -> dict[str, Any]:
    """A `CompletionChoice`'s dump, as `capture._choice_fields` gathers it."""
    message = None
    if isinstance(raw.get("message"), dict):
        message = _message({"role": "assistant", **raw["message"]} if "role" not in raw["message"] else raw["message"])
    ids = raw.get("token_ids")
    lps = raw.get("_logprob_values")
    if lps is None:
        lps = _token_logprobs(raw.get("logprobs"))
    if ids is not None and lps is not None and len(ids) != len(lps):
        lps = None
    index = int(raw.get("index", 0))
    text = raw.get("text") if message is None else None
    finish_reason = raw.get("finish_reason")
    if index < 0 or not (_int_list(ids) and _float_list(lps)):
        raise _NotPlain
    return {
        "index": index,
        "message": message,
        "text": _optional_str(text),
        "finish_reason": _optional_str(finish_reason),
        "completion_token_ids": None if ids is None else list(ids),
        "logprobs": None if lps is None else list(lps),
        "redacted_token_spans": None,
    }


def _usage(raw: Any) -> dict[str, int] | None:
    """`capture._usage_fields`, for a usage every count of which is a non-negative int (else the events' path)."""
    if not isinstance(raw, dict):
        return None
    fields = {name: raw.get(name) or 0 for name in ("prompt_tokens", "completion_tokens", "total_tokens")}
    if not all(type(v) is int and v >= 0 for v in fields.values()):
        raise _NotPlain
    return fields


def _prompt_token_ids(reply: dict[str, Any], choices: list[dict[str, Any]]) -> list[int] | None:
    ids = reply.get("prompt_token_ids")
    if ids is None and choices:
        first = (reply.get("choices") or [{}])[0]
        ids = first.get("prompt_token_ids") if isinstance(first, dict) else None
    if not isinstance(ids, list):
        return None
    if not _int_list(ids):
        raise _NotPlain
    return list(ids)


def _tools(raw: Any) -> list[dict[str, Any]] | None:
    if raw is None:
        return None
    if not _list_of_dicts(raw):
        raise _NotPlain
    return [dict(tool) for tool in raw]


def _check_non_negative(value: float | None) -> None:
    if value is not None and not value >= 0:
        raise _NotPlain


def _optional_str(value: Any) -> str | None:
    if value is not None and type(value) is not str:
        raise _NotPlain
    return value


def _list(value: Any) -> list[Any]:
    if type(value) is not list:
        raise _NotPlain
    return value


def _list_of_dicts(value: Any) -> bool:
    return type(value) is list and all(type(item) is dict for item in value)


def _int_list(value: Any) -> bool:
    return value is None or (type(value) is list and all(type(item) is int for item in value))


def _float_list(value: Any) -> bool:
    return value is None or (type(value) is list and all(type(item) is float for item in value))
