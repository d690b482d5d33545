"""OpenAI chat-completions logs -> ATDP.

Input records are request/response pairs, one JSON object each:
`{"request": {...chat.completions body...}, "response": {...ChatCompletion...},
  "session_id"?: str, "started_at"?: ISO or epoch seconds, "latency_ms"?: float, "metadata"?: {...}}`.

Records are grouped into trajectories by `session_id` when present; otherwise a record
continues the trajectory whose last request + answer its own messages extend (the
prefix rule an agent loop produces), else it starts a new one. `role: tool` messages
in a later request become `tool_call` steps linked by `tool_call_id` to the llm_call
that requested them, with the status inferred as unknown (the log cannot know).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from evolvable.errors import ConversionError
from evolvable.protocol.converters.stamps import known_stamps
from evolvable.protocol.models import (
    ChatMessage,
    CompletionChoice,
    ErrorInfo,
    LLMCallStep,
    StepStatus,
    ToolCall,
    ToolCallStep,
    Trajectory,
    TrajectoryStatus,
    Usage,
    new_id,
)
from evolvable.protocol.validation import describe

_SAMPLING_KEYS = (
    "temperature",
    "top_p",
    "max_tokens",
    "max_completion_tokens",
    "n",
    "seed",
    "stop",
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
    "response_format",
    "tool_choice",
    "parallel_tool_calls",
    "logprobs",
    "top_logprobs",
)


def _time(value: Any) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, int | float):
        return datetime.fromtimestamp(float(value), UTC)
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))


def _choice(raw: dict[str, Any]) -> CompletionChoice:
    lp = raw.get("logprobs")
    logprobs = None
    if isinstance(lp, dict) and isinstance(lp.get("content"), list):
        logprobs = [float(item["logprob"]) for item in lp["content"]]
    token_ids = raw.get("token_ids")
    if token_ids is not None and logprobs is not None and len(logprobs) != len(token_ids):
        logprobs = None  # misaligned engine output: keep the ids, never guess the logprobs
    return CompletionChoice(
        index=raw.get("index", 0),
        message=ChatMessage.model_validate(raw["message"]) if raw.get("message") else None,
        text=raw.get("text"),
        finish_reason=raw.get("finish_reason"),
        completion_token_ids=token_ids,
        logprobs=logprobs if token_ids is not None else None,
    )


def llm_step_from_pair(request: dict[str, Any], response: dict[str, Any] | None, **extra: Any) -> LLMCallStep:
    """One request/response pair as an llm_call step (used by the proxy's capture path too)."""
    response = response or {}
    error = response.get("error") if isinstance(response.get("error"), dict) else None
    usage = response.get("usage")
    step = LLMCallStep(
        endpoint="completions" if "prompt" in request and "messages" not in request else "chat",
        model=response.get("model") or request.get("model"),
        request_messages=[ChatMessage.model_validate(m) for m in request.get("messages", [])],
        prompt=request["prompt"] if isinstance(request.get("prompt"), str) else None,
        tools=request.get("tools"),
        sampling={k: request[k] for k in _SAMPLING_KEYS if k in request},
        stream=bool(request.get("stream", False)),
        choices=[_choice(c) for c in response.get("choices", [])],
        prompt_token_ids=response.get("prompt_token_ids"),
        usage=Usage.model_validate(
            {k: usage.get(k, 0) or 0 for k in ("prompt_tokens", "completion_tokens", "total_tokens")}
        )
        if isinstance(usage, dict)
        else None,
        response_id=response.get("id"),
        status=StepStatus.error if error else StepStatus.ok,
        error=ErrorInfo(
            type=str(error.get("type") or "error"),
            message=str(error.get("message", "")),
            status_code=error.get("code") if isinstance(error.get("code"), int) else None,
        )
        if error
        else None,
        **extra,
    )
    return step


def _assistant_dump(step: LLMCallStep) -> list[dict[str, Any]]:
    msg = step.response
    return [msg.model_dump(exclude_none=True)] if msg else []


def _canon(messages: list[dict[str, Any]]) -> list[str]:
    return [json.dumps([m.get("role"), m.get("content") or "", m.get("tool_call_id")]) for m in messages]


class _Open:
    def __init__(self, trajectory: Trajectory) -> None:
        self.trajectory = trajectory
        self.seen: list[str] = []  # canonical messages so far (last request + its answer)
        self.requested: dict[str, str] = {}  # tool_call_id -> llm step id
        self.recorded_tools: set[str] = set()


def from_openai_chat(
    records: Iterable[dict[str, Any]], *, agent: str = "default", tenant_id: str = "default"
) -> list[Trajectory]:
    """Group request/response records into trajectories (see module docstring)."""
    open_by_session: dict[str, _Open] = {}
    unkeyed: list[_Open] = []
    ordered: list[_Open] = []
    for n, record in enumerate(records, start=1):
        if not isinstance(record, dict) or not isinstance(record.get("request"), dict):
            raise ConversionError(f"record {n}: expected an object with a 'request' object (and usually 'response')")
        req, resp = record["request"], record.get("response")
        messages = req.get("messages", [])
        canon = _canon(messages)
        session = record.get("session_id")
        state: _Open | None = None
        if session is not None:
            state = open_by_session.get(str(session))
        else:
            for cand in reversed(unkeyed):
                if cand.seen and canon[: len(cand.seen)] == cand.seen:
                    state = cand
                    break
        started = _time(record.get("started_at"))
        if state is None:
            first_user = next((m.get("content") for m in messages if m.get("role") == "user"), None)
            traj = Trajectory(
                id=f"traj_{session}" if session is not None else new_id("traj"),
                agent=record.get("agent", agent),
                tenant_id=tenant_id,
                task_input=first_user,
                status=TrajectoryStatus.completed,
                metadata=dict(record.get("metadata", {})),
                **known_stamps(started),
            )
            state = _Open(traj)
            ordered.append(state)
            if session is not None:
                open_by_session[str(session)] = state
            else:
                unkeyed.append(state)
        try:
            for m in messages:
                if m.get("role") == "tool" and m.get("tool_call_id") and m["tool_call_id"] not in state.recorded_tools:
                    tcid = m["tool_call_id"]
                    parent = state.requested.get(tcid)
                    name = _tool_name(state.trajectory, parent, tcid)
                    state.trajectory.steps.append(
                        ToolCallStep(
                            tool_name=name or m.get("name") or "unknown",
                            arguments=_tool_args(state.trajectory, parent, tcid),
                            result=m.get("content"),
                            tool_call_id=tcid,
                            llm_step_id=parent,
                            parent_step_id=parent,
                        )
                    )
                    state.recorded_tools.add(tcid)
            extra: dict[str, Any] = {}
            if started:
                extra["started_at"] = started
            if record.get("latency_ms") is not None:
                extra["latency_ms"] = float(record["latency_ms"])
            step = llm_step_from_pair(req, resp, **extra)
        except ValidationError as err:
            raise ConversionError(f"record {n}: " + "; ".join(describe(err))) from None
        state.trajectory.steps.append(step)
        if step.status == StepStatus.error:
            state.trajectory.status = TrajectoryStatus.failed
        for call in (step.response.tool_calls or []) if step.response else []:
            state.requested[call.id] = step.id
        state.seen = canon + _canon(_assistant_dump(step))
    out = []
    for state in ordered:
        t = state.trajectory
        if t.steps:
            t.started_at = min(s.started_at for s in t.steps)
            t.ended_at = max((s.ended_at or s.started_at) for s in t.steps)
        out.append(Trajectory.model_validate(t.model_dump()))
    return out


def _find_call(trajectory: Trajectory, parent: str | None, tool_call_id: str) -> ToolCall | None:
    for step in trajectory.steps:
        if isinstance(step, LLMCallStep) and step.id == parent and step.response and step.response.tool_calls:
            for call in step.response.tool_calls:
                if call.id == tool_call_id:
                    return call
    return None


def _tool_name(trajectory: Trajectory, parent: str | None, tool_call_id: str) -> str | None:
    call = _find_call(trajectory, parent, tool_call_id)
    return call.function.name if call else None


def _tool_args(trajectory: Trajectory, parent: str | None, tool_call_id: str) -> dict[str, Any] | str | None:
    call = _find_call(trajectory, parent, tool_call_id)
    if call is None:
        return None
    try:
        parsed = json.loads(call.function.arguments or "{}")
    except json.JSONDecodeError:
        return call.function.arguments
    return parsed if isinstance(parsed, dict) else call.function.arguments
