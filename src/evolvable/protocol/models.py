"""ATDP — the Agent Trajectory Data Protocol.

One typed, versioned record of what an agent did, step by step, with learning
signals attached at step granularity. Every other part of Evolvable speaks it.

Our own models are strict (unknown fields are errors, so typos do not vanish).
Models that mirror an external wire format (OpenAI chat messages) accept extra
fields, because providers add fields faster than we could list them.
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

SCHEMA_VERSION = "1.1.0"
"""Semver of the wire format. Any change to the models below bumps it: an added optional field the minor
(records of an older minor stay valid), anything else the major."""


def new_id(prefix: str) -> str:
    """A collision-free id with a readable type prefix, ordered by creation time: a UUID version 7 (RFC 9562,
    section 5.7: 48 bits of Unix milliseconds, then 74 random bits) as 32 hex digits, the length uuid4 had.

    Time order is for the store: ids made one after another land side by side in every index keyed by them
    (trajectories, the event ledger, steps), where random ids scattered each batch over the whole B-tree and
    made inserts cost more the bigger the table (`benchmarks/id_locality.py`, docs/PERFORMANCE.md). The random
    bits come from `os.urandom`, so a forked process (the capture writer) never repeats its parent's ids.
    (`uuid.uuid7` arrives with Python 3.14.)"""
    millis = time.time_ns() // 1_000_000
    entropy = int.from_bytes(os.urandom(10), "big")
    value = (millis & _MILLIS_MASK) << 80 | 7 << 76 | (entropy >> 68) << 64 | 2 << 62 | (entropy & _RAND_B_MASK)
    return f"{prefix}_{value:032x}"


_MILLIS_MASK = (1 << 48) - 1
_RAND_B_MASK = (1 << 62) - 1


def utcnow() -> datetime:
    return datetime.now(UTC)


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, validate_assignment=True)


class OpenModel(BaseModel):
    """Mirrors an external format: unknown provider fields are kept, not rejected."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)


# --------------------------------------------------------------------------- enums


class TrajectoryStatus(StrEnum):
    running = "running"
    completed = "completed"
    failed = "failed"
    abandoned = "abandoned"


class StepStatus(StrEnum):
    ok = "ok"
    error = "error"
    unknown = "unknown"


class SignalKind(StrEnum):
    outcome = "outcome"
    process = "process"
    user_feedback = "user_feedback"
    verifier = "verifier"
    tool_error = "tool_error"
    judge = "judge"


class CaptureMode(StrEnum):
    """How much of a run is kept: redacted content, structure only, or nothing."""

    full = "full"
    metadata = "metadata"
    off = "off"


# --------------------------------------------------------------------------- OpenAI-shaped parts


class FunctionCall(OpenModel):
    name: str
    arguments: str = ""


class ToolCall(OpenModel):
    id: str
    type: str = "function"
    function: FunctionCall


class ChatMessage(OpenModel):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None

    def text(self) -> str:
        """The message's text, with multi-part content joined."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(str(p.get("text", "")) for p in self.content if isinstance(p, dict))


class Usage(StrictModel):
    prompt_tokens: int = Field(0, ge=0)
    completion_tokens: int = Field(0, ge=0)
    total_tokens: int = Field(0, ge=0)


class ErrorInfo(StrictModel):
    type: str
    message: str
    status_code: int | None = None


class CompletionChoice(StrictModel):
    """One sampled answer. Token ids and logprobs are the engine's, never re-tokenized."""

    index: int = Field(0, ge=0)
    message: ChatMessage | None = None
    text: str | None = Field(None, description="For /v1/completions calls.")
    finish_reason: str | None = None
    completion_token_ids: list[int] | None = None
    logprobs: list[float] | None = Field(
        None, description="Behaviour logprob of each completion token, aligned with completion_token_ids."
    )
    redacted_token_spans: list[tuple[int, int]] | None = Field(
        None,
        description="[start, end) ranges of completion_token_ids that redaction replaced with tokenized "
        "placeholders (since 1.1.0). The policy never sampled them: their logprobs are 0.0 and RL gives them "
        "loss mask 0.",
    )

    @model_validator(mode="after")
    def _aligned(self) -> CompletionChoice:
        ids, lps = self.completion_token_ids, self.logprobs
        if ids is not None and lps is not None and len(ids) != len(lps):
            raise ValueError(
                f"logprobs has {len(lps)} entries but completion_token_ids has {len(ids)}; they must align"
            )
        if self.redacted_token_spans:
            if ids is None:
                raise ValueError("redacted_token_spans needs completion_token_ids")
            end = 0
            for start, stop in self.redacted_token_spans:
                if not end <= start < stop <= len(ids):
                    raise ValueError(
                        f"redacted_token_spans must be sorted, non-overlapping, non-empty ranges within the "
                        f"{len(ids)} completion tokens; got ({start}, {stop})"
                    )
                end = stop
        return self

    def redacted_token_mask(self) -> list[bool]:
        """Per completion token: True where redaction replaced it (never sampled by the policy)."""
        mask = [False] * len(self.completion_token_ids or [])
        for start, stop in self.redacted_token_spans or []:
            mask[start:stop] = [True] * (stop - start)
        return mask


# --------------------------------------------------------------------------- steps


class StepBase(StrictModel):
    id: str = Field(default_factory=lambda: new_id("step"))
    agent: str | None = Field(None, description="Which agent took the step (multi-agent runs).")
    parent_step_id: str | None = Field(None, description="The step that caused this one (handoffs, tool calls).")
    started_at: datetime = Field(default_factory=utcnow)
    ended_at: datetime | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


class LLMCallStep(StepBase):
    kind: Literal["llm_call"] = "llm_call"
    endpoint: Literal["chat", "completions"] = "chat"
    model: str | None = None
    request_messages: list[ChatMessage] = Field(default_factory=list)
    prompt: str | None = Field(None, description="Prompt text for /v1/completions calls.")
    tools: list[dict[str, Any]] | None = None
    sampling: dict[str, Any] = Field(default_factory=dict, description="temperature, top_p, max_tokens, n, seed, ...")
    stream: bool = False
    choices: list[CompletionChoice] = Field(default_factory=list)
    prompt_token_ids: list[int] | None = None
    policy_version: str | None = Field(None, description="The policy version that produced the tokens.")
    usage: Usage | None = None
    latency_ms: float | None = Field(None, ge=0)
    time_to_first_token_ms: float | None = Field(None, ge=0)
    request_id: str | None = Field(None, description="Evolvable's id of the HTTP call; retries get new ones.")
    response_id: str | None = Field(None, description="The upstream's response id (chatcmpl-...).")
    status: StepStatus = StepStatus.ok
    error: ErrorInfo | None = None

    @property
    def response(self) -> ChatMessage | None:
        """The first choice's message, which is what the agent acted on."""
        return self.choices[0].message if self.choices else None

    @property
    def has_token_ids(self) -> bool:
        return (
            self.prompt_token_ids is not None
            and bool(self.choices)
            and all(c.completion_token_ids is not None for c in self.choices)
        )


class ToolCallStep(StepBase):
    kind: Literal["tool_call"] = "tool_call"
    tool_name: str
    arguments: dict[str, Any] | str | None = None
    result: Any = None
    status: StepStatus = StepStatus.unknown
    error_class: str | None = None
    error_message: str | None = None
    latency_ms: float | None = Field(None, ge=0)
    tool_call_id: str | None = Field(None, description="Links the result to the llm_call that requested it.")
    llm_step_id: str | None = Field(None, description="The llm_call step that requested this tool call.")


class MessageStep(StepBase):
    kind: Literal["message"] = "message"
    role: Literal["user", "environment", "system"] = "user"
    content: str | list[dict[str, Any]] | None = None


class HandoffStep(StepBase):
    kind: Literal["handoff"] = "handoff"
    from_agent: str
    to_agent: str
    reason: str | None = None
    input: Any = None


class MemoryOpStep(StepBase):
    kind: Literal["memory_op"] = "memory_op"
    op: Literal["read", "write", "retrieve", "delete"]
    store: str = "default"
    key: str | None = None
    items: list[Any] = Field(default_factory=list)


class SkillUseStep(StepBase):
    kind: Literal["skill_use"] = "skill_use"
    skill_name: str
    skill_version: str | None = None
    input: Any = None
    output: Any = None


Step = Annotated[
    LLMCallStep | ToolCallStep | MessageStep | HandoffStep | MemoryOpStep | SkillUseStep,
    Field(discriminator="kind"),
]
STEP_KINDS = ("llm_call", "tool_call", "message", "handoff", "memory_op", "skill_use")


# --------------------------------------------------------------------------- signals


class Signal(StrictModel):
    """A learning signal on a whole trajectory (step_id None) or on one step; may arrive late."""

    id: str = Field(default_factory=lambda: new_id("sig"))
    kind: SignalKind
    value: float
    step_id: str | None = None
    label: str | None = Field(None, description="Categorical verdict or reason, e.g. 'wrong_tool'.")
    source: str = Field("unknown", description="Who emitted it: verifier name, 'user', judge model, ...")
    confidence: float = Field(1.0, ge=0.0, le=1.0)
    created_at: datetime = Field(default_factory=utcnow)
    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("value")
    @classmethod
    def _finite(cls, v: float) -> float:
        if v != v or v in (float("inf"), float("-inf")):
            raise ValueError("signal value must be a finite number")
        return v


# --------------------------------------------------------------------------- trajectory


class RunCapture(NamedTuple):
    """Who runs a trajectory and the capture it asked for: what governance decides the capture policy of any
    of the run's events by. Only the start event holds the header, so whoever hands a governor the later
    events carries this with them (the governor never reads the header back from the store)."""

    agent: str
    capture: CaptureMode = CaptureMode.full


class TrajectoryHeader(StrictModel):
    """Everything about a run except its steps and signals."""

    schema_version: str = SCHEMA_VERSION
    id: str = Field(default_factory=lambda: new_id("traj"))
    tenant_id: str = "default"
    agent: str = "default"
    end_user: str | None = Field(None, description="The end user the run served; purge by user uses it.")
    harness_version: str | None = None
    policy_version: str | None = None
    task_id: str | None = Field(None, description="A reference to a replayable task, when known.")
    task_input: Any = None
    status: TrajectoryStatus = TrajectoryStatus.running
    capture: CaptureMode = CaptureMode.full
    started_at: datetime = Field(default_factory=utcnow)
    ended_at: datetime | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    def run_capture(self) -> RunCapture:
        return RunCapture(self.agent, self.capture)

    @field_validator("schema_version")
    @classmethod
    def _same_major(cls, v: str) -> str:
        major = v.split(".", 1)[0]
        if major != SCHEMA_VERSION.split(".", 1)[0]:
            raise ValueError(f"schema_version {v} is not compatible with {SCHEMA_VERSION} (major differs)")
        return v


class Trajectory(TrajectoryHeader):
    steps: list[Step] = Field(default_factory=list)
    signals: list[Signal] = Field(default_factory=list)

    @model_validator(mode="after")
    def _references_resolve(self) -> Trajectory:
        ids = [s.id for s in self.steps]
        if len(ids) != len(set(ids)):
            raise ValueError("step ids must be unique within a trajectory")
        known = set(ids)
        for sig in self.signals:
            if sig.step_id is not None and sig.step_id not in known:
                raise ValueError(f"signal {sig.id} refers to unknown step {sig.step_id}")
        return self

    def header(self) -> TrajectoryHeader:
        return TrajectoryHeader.model_validate(self.model_dump(exclude={"steps", "signals"}))

    def llm_calls(self) -> list[LLMCallStep]:
        return [s for s in self.steps if isinstance(s, LLMCallStep)]

    def tool_calls(self) -> list[ToolCallStep]:
        return [s for s in self.steps if isinstance(s, ToolCallStep)]

    def outcome(self) -> float | None:
        """The latest trajectory-level outcome signal, if any."""
        outs = [s for s in self.signals if s.kind == SignalKind.outcome and s.step_id is None]
        return max(outs, key=lambda s: s.created_at).value if outs else None


# --------------------------------------------------------------------------- events


class EventBase(StrictModel):
    """A change to the store; replaying the same event id twice is a no-op."""

    event_id: str = Field(default_factory=lambda: new_id("evt"))
    trajectory_id: str
    tenant_id: str = "default"
    occurred_at: datetime = Field(default_factory=utcnow)


class TrajectoryStarted(EventBase):
    type: Literal["trajectory_started"] = "trajectory_started"
    header: TrajectoryHeader

    @model_validator(mode="after")
    def _ids_match(self) -> TrajectoryStarted:
        if self.header.id != self.trajectory_id:
            raise ValueError("header.id must equal trajectory_id")
        return self


class StepAppended(EventBase):
    type: Literal["step_appended"] = "step_appended"
    step: Step


class SignalAttached(EventBase):
    type: Literal["signal_attached"] = "signal_attached"
    signal: Signal


class TrajectoryEnded(EventBase):
    type: Literal["trajectory_ended"] = "trajectory_ended"
    status: TrajectoryStatus
    ended_at: datetime = Field(default_factory=utcnow)
    metadata: dict[str, Any] = Field(default_factory=dict, description="Merged into the trajectory's metadata.")


class VersionsNamed(EventBase):
    """The run's harness / policy versions, named after its start (a proxy learns them at the first call).

    Fills only the versions the header still lacks: a version a run started with never changes."""

    type: Literal["versions_named"] = "versions_named"
    harness_version: str | None = None
    policy_version: str | None = None


Event = Annotated[
    TrajectoryStarted | StepAppended | SignalAttached | TrajectoryEnded | VersionsNamed,
    Field(discriminator="type"),
]


def events_for(trajectory: Trajectory) -> list[TrajectoryStarted | StepAppended | SignalAttached | TrajectoryEnded]:
    """Decompose a whole trajectory into the events that rebuild it (ids derived, so idempotent)."""
    tid, tenant = trajectory.id, trajectory.tenant_id
    out: list[TrajectoryStarted | StepAppended | SignalAttached | TrajectoryEnded] = [
        TrajectoryStarted(event_id=f"{tid}:start", trajectory_id=tid, tenant_id=tenant, header=trajectory.header())
    ]
    out += [
        StepAppended(event_id=f"{tid}:{s.id}", trajectory_id=tid, tenant_id=tenant, step=s) for s in trajectory.steps
    ]
    out += [
        SignalAttached(event_id=f"{tid}:{g.id}", trajectory_id=tid, tenant_id=tenant, signal=g)
        for g in trajectory.signals
    ]
    if trajectory.status != TrajectoryStatus.running:
        out.append(
            TrajectoryEnded(
                event_id=f"{tid}:end",
                trajectory_id=tid,
                tenant_id=tenant,
                status=trajectory.status,
                ended_at=trajectory.ended_at or utcnow(),
            )
        )
    return out
