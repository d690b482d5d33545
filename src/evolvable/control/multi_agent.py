"""Multi-agent runs: an orchestrator's session holds the calls of its sub-agents; each evolves on its own.

Inside a session a call names its sub-agent with the `x-evolvable-agent` header. The proxy records
the step with that agent, applies the sub-agent's own harness (its version lands in the step's
metadata `harness_version`), and records a `handoff` step whenever the calling agent changes.

For the control plane a sub-agent is an agent like any other (its own harness versions, statistics,
decisions and verdicts); its runs are the orchestrator's runs it took part in, seen from its side
(`sub_agent_view`): its own steps and the handoffs into and out of it, the signals on its steps
and the run-level signals. Credit: the run's outcome (or judge score) counts for every sub-agent
that took part; failure labels on a step count only for the agent that made that step.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from evolvable.control.models import REPLAY_METADATA_KEY
from evolvable.control.statistics import Clusterer, RunSummary, summarize
from evolvable.protocol.models import HandoffStep, LLMCallStep, Trajectory, TrajectoryStatus
from evolvable.store import Store


def sub_agents_of(t: Trajectory) -> list[str]:
    """The agents other than the session's own that made steps in the run, in order of appearance."""
    seen: dict[str, None] = {}
    for step in t.steps:
        if step.agent and step.agent != t.agent:
            seen.setdefault(step.agent)
    return list(seen)


def sub_agent_view(t: Trajectory, agent: str) -> Trajectory | None:
    """The run as `agent` took part in it (the session's own agent: its own steps), or None when it did not."""

    def owner(step: Any) -> str:
        return step.agent or t.agent

    mine = [
        s for s in t.steps if owner(s) == agent or (isinstance(s, HandoffStep) and agent in (s.from_agent, s.to_agent))
    ]
    if not any(owner(s) == agent for s in mine):
        return None
    ids = {s.id for s in mine}
    version = next(
        (s.metadata.get("harness_version") for s in mine if isinstance(s, LLMCallStep) and owner(s) == agent),
        None,
    )
    return t.model_copy(
        update={
            "agent": agent,
            "harness_version": t.harness_version if agent == t.agent else version,
            "steps": mine,
            "signals": [sig for sig in t.signals if sig.step_id is None or sig.step_id in ids],
            "metadata": {**t.metadata, "orchestrator": t.agent},
        }
    )


def load_sub_agent_runs(
    store: Store,
    orchestrator: str,
    agent: str,
    *,
    limit: int = 500,
    clusterer: Clusterer | None = None,
    success_threshold: float = 0.5,
    tenant_id: str | None = None,
) -> list[RunSummary]:
    """The newest `limit` finished runs of the orchestrator that `agent` took part in, from its side."""
    from evolvable.store import TrajectoryFilter

    window: deque[RunSummary] = deque(maxlen=limit)
    for t in store.iter_trajectories(TrajectoryFilter(agent=orchestrator, tenant_id=tenant_id)):
        if t.status == TrajectoryStatus.running or REPLAY_METADATA_KEY in t.metadata:
            continue
        view = sub_agent_view(t, agent)
        if view is not None:
            window.append(summarize(view, clusterer=clusterer, success_threshold=success_threshold))
    return sorted(window, key=lambda r: r.started_at)
