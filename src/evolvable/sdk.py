"""Record an in-process agent run as an ATDP trajectory, through the same store path as the proxy.

    import evolvable

    with evolvable.trajectory(agent="support", task_input=ticket) as t:
        call = t.llm_call(model="m", request_messages=[...], choices=[...])
        t.tool_call(tool_name="lookup_order", arguments={"id": 7}, result={...}, status="ok")
        t.signal("outcome", 1.0)

Every step and signal is written as it happens (one `apply_events` call each), so
a crash keeps what was recorded so far. Leaving the block ends the trajectory:
`completed`, or `failed` when an exception escapes (the exception is re-raised).
Signals may still be attached after the block (late feedback).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any

from evolvable.protocol.models import (
    HandoffStep,
    LLMCallStep,
    MemoryOpStep,
    MessageStep,
    Signal,
    SignalAttached,
    SignalKind,
    SkillUseStep,
    Step,
    StepAppended,
    ToolCallStep,
    TrajectoryEnded,
    TrajectoryHeader,
    TrajectoryStarted,
    TrajectoryStatus,
)
from evolvable.store import Store

__all__ = ["TrajectoryRecorder", "trajectory"]


@cache
def _default_store(url: str) -> Store:
    """One store per database for the process: late signals still work after the block."""
    return Store.open(url)


class TrajectoryRecorder:
    """Appends steps and signals to one trajectory. Made by `trajectory(...)`."""

    def __init__(self, store: Store, header: TrajectoryHeader) -> None:
        self.store = store
        self.header = header
        self.ended = False

    @property
    def id(self) -> str:
        return self.header.id

    def _apply(self, event: Any) -> None:
        self.store.apply_events([event])

    def _ids(self) -> dict[str, str]:
        return {"trajectory_id": self.header.id, "tenant_id": self.header.tenant_id}

    def step(self, step: Step) -> Step:
        """Record any ATDP step; returns it (its `id` is what signals and `parent_step_id` refer to)."""
        self._apply(StepAppended(step=step, **self._ids()))
        return step

    def llm_call(self, **fields: Any) -> LLMCallStep:
        return self.step(LLMCallStep(**fields))  # type: ignore[return-value]

    def tool_call(self, **fields: Any) -> ToolCallStep:
        return self.step(ToolCallStep(**fields))  # type: ignore[return-value]

    def message(self, **fields: Any) -> MessageStep:
        return self.step(MessageStep(**fields))  # type: ignore[return-value]

    def handoff(self, **fields: Any) -> HandoffStep:
        return self.step(HandoffStep(**fields))  # type: ignore[return-value]

    def memory_op(self, **fields: Any) -> MemoryOpStep:
        return self.step(MemoryOpStep(**fields))  # type: ignore[return-value]

    def skill_use(self, **fields: Any) -> SkillUseStep:
        return self.step(SkillUseStep(**fields))  # type: ignore[return-value]

    def signal(self, kind: SignalKind | str, value: float, step: Step | str | None = None, **fields: Any) -> Signal:
        """Attach a signal to the trajectory, or to a step (the step or its id). Allowed after the end."""
        step_id = step if isinstance(step, str) or step is None else step.id
        signal = Signal(kind=SignalKind(kind), value=value, step_id=step_id, **fields)
        self._apply(SignalAttached(signal=signal, **self._ids()))
        return signal

    def end(self, status: TrajectoryStatus | str = TrajectoryStatus.completed, **metadata: Any) -> None:
        """End the trajectory now (leaving the block then changes nothing)."""
        self._apply(TrajectoryEnded(status=TrajectoryStatus(status), metadata=metadata, **self._ids()))
        self.ended = True


@contextmanager
def trajectory(
    agent: str = "default",
    task_input: Any = None,
    *,
    store: Store | None = None,
    tenant_id: str = "default",
    end_user: str | None = None,
    harness_version: str | None = None,
    policy_version: str | None = None,
    task_id: str | None = None,
    metadata: dict[str, Any] | None = None,
    trajectory_id: str | None = None,
) -> Iterator[TrajectoryRecorder]:
    """Record one run. `store=None` uses the settings' database (embedded SQLite by default)."""
    if store is None:
        from evolvable.settings import get_settings

        store = _default_store(get_settings().resolved_db_url())
    header = TrajectoryHeader(
        agent=agent,
        task_input=task_input,
        tenant_id=tenant_id,
        end_user=end_user,
        harness_version=harness_version,
        policy_version=policy_version,
        task_id=task_id,
        metadata=metadata or {},
        **({"id": trajectory_id} if trajectory_id else {}),
    )
    recorder = TrajectoryRecorder(store, header)
    store.apply_events([TrajectoryStarted(header=header, trajectory_id=header.id, tenant_id=tenant_id)])
    try:
        yield recorder
    except BaseException as err:
        if not recorder.ended:
            recorder.end(TrajectoryStatus.failed, error={"type": type(err).__name__, "message": str(err)[:2000]})
        raise
    if not recorder.ended:
        recorder.end(TrajectoryStatus.completed)
