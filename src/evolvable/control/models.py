"""Records of the control plane: versions, decisions, rollouts. Plain pydantic, no I/O."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from evolvable.protocol.harness import Harness

REPLAY_METADATA_KEY = "evolvable_replay"
"""Session metadata `{"evolvable_replay": {"harness_version": ...}}` pins a replay session to that harness
version (even a candidate that serves no live traffic) and keeps the run out of the live statistics."""


class VersionKind(StrEnum):
    harness = "harness"
    policy = "policy"


class VersionState(StrEnum):
    candidate = "candidate"
    canary = "canary"
    active = "active"
    retired = "retired"
    rejected = "rejected"


# The explicit transition table. Restoring an earlier version is retired|rejected -> active in one step.
TRANSITIONS: dict[VersionState, frozenset[VersionState]] = {
    VersionState.candidate: frozenset({VersionState.canary, VersionState.active, VersionState.rejected}),
    VersionState.canary: frozenset({VersionState.active, VersionState.rejected, VersionState.candidate}),
    VersionState.active: frozenset({VersionState.retired}),
    VersionState.retired: frozenset({VersionState.active, VersionState.candidate, VersionState.rejected}),
    VersionState.rejected: frozenset({VersionState.active, VersionState.candidate}),
}


class Lever(StrEnum):
    """Ordered by blast radius: memory is cheapest and most reversible, weights the most expensive."""

    memory = "memory"
    tool = "tool"
    skill = "skill"
    prompt = "prompt"
    weights = "weights"
    rollback = "rollback"
    none = "none"


BLAST_RADIUS: dict[Lever, int] = {
    Lever.none: 0,
    Lever.rollback: 0,
    Lever.memory: 1,
    Lever.tool: 2,
    Lever.skill: 3,
    Lever.prompt: 4,
    Lever.weights: 5,
}


class DecisionState(StrEnum):
    proposed = "proposed"
    awaiting_approval = "awaiting_approval"
    gated_out = "gated_out"  # failed the replay or safety gate; never served
    canary = "canary"
    promoted = "promoted"
    rolled_back = "rolled_back"
    paused = "paused"
    unavailable = "unavailable"  # the lever cannot run here (e.g. no trainer installed)
    applied = "applied"  # rollbacks and restores take effect at once
    failed = "failed"  # the evolver could not produce a candidate


class Verdict(StrEnum):
    effective = "effective"
    partially_effective = "partially_effective"
    ineffective = "ineffective"
    harmful = "harmful"


class RolloutState(StrEnum):
    running = "running"
    paused = "paused"
    promoted = "promoted"
    rolled_back = "rolled_back"


class AnalysisResult(StrEnum):
    successful = "successful"
    failed = "failed"
    inconclusive = "inconclusive"


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PolicySpec(_Record):
    """What serves a policy version: a base model, optionally a LoRA adapter loaded under `lora_name`."""

    base_model: str
    lora_name: str | None = None
    adapter_path: str | None = None
    upstream: str | None = Field(None, description="Upstream name in the proxy config; None = the default.")

    @property
    def served_model(self) -> str:
        """The `model` value to send upstream: the adapter's name, else the base model."""
        return self.lora_name or self.base_model


class VersionRecord(_Record):
    id: str
    kind: VersionKind
    agent: str
    tenant: str = "default"
    state: VersionState
    parent_id: str | None = None
    content: dict[str, Any]
    lineage: dict[str, Any] = Field(default_factory=dict)
    note: str = ""
    created_by: str = "user"
    created_at: datetime
    updated_at: datetime

    def harness(self) -> Harness:
        return Harness.model_validate(self.content)

    def policy(self) -> PolicySpec:
        return PolicySpec.model_validate(self.content)


class Transition(_Record):
    version_id: str
    kind: VersionKind
    agent: str
    tenant: str = "default"
    from_state: VersionState | None
    to_state: VersionState
    reason: str = ""
    actor: str = "user"
    at: datetime


class Decision(_Record):
    id: str
    agent: str
    tenant: str = "default"
    lever: Lever
    state: DecisionState
    rationale: str = ""
    evidence: dict[str, Any] = Field(default_factory=dict)
    predicted: dict[str, Any] = Field(
        default_factory=dict, description="{'improve': [clusters], 'at_risk': [clusters], 'note': str}"
    )
    candidate_kind: VersionKind | None = None
    candidate_version: str | None = None
    baseline_version: str | None = None
    gates: dict[str, Any] = Field(default_factory=dict)
    rollout_id: str | None = None
    requires_approval: bool = False
    approved_by: str | None = None
    verdict: Verdict | None = None
    verdict_detail: dict[str, Any] | None = None
    created_at: datetime
    updated_at: datetime


class Rollout(_Record):
    id: str
    agent: str
    tenant: str = "default"
    kind: VersionKind
    decision_id: str | None = None
    candidate_version: str
    baseline_version: str | None = None
    share: float
    state: RolloutState
    extensions: int = 0
    analyses: list[dict[str, Any]] = Field(default_factory=list)
    started_at: datetime
    ended_at: datetime | None = None
