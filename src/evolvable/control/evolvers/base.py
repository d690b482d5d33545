"""The types every evolver shares: what it is given (`EvolveContext`) and what it proposes."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from evolvable.control.decision import Proposal
from evolvable.control.models import Lever, PolicySpec, VersionRecord
from evolvable.control.statistics import AgentStatistics, RunSummary
from evolvable.errors import ControlError
from evolvable.protocol.harness import Harness
from evolvable.store import Store

if TYPE_CHECKING:
    from evolvable.control.gates import ReplaySuite


class LeverUnavailable(ControlError):
    """The lever cannot run in this installation; the decision records the reason verbatim."""


class LeverPending(LeverUnavailable):
    """The lever's work is under way in the background (a training job); a later tick continues it.
    The decision records it as `pending` in its gates, and it does not cool the lever down."""


@dataclass
class EvolveContext:
    agent: str
    store: Store
    active_harness: Harness
    active_harness_version: str
    runs: list[RunSummary]
    stats: AgentStatistics
    active_policy: VersionRecord | None = None
    suite: ReplaySuite | None = None
    """The agent's ReplaySuite, when one is registered (its runner may explore recorded tasks)."""
    cancel: threading.Event = field(default_factory=threading.Event)
    """Set when the decision's time budget ran out: a long evolver should stop; its result will be discarded."""


@dataclass
class HarnessCandidate:
    harness: Harness
    note: str
    changes: dict[str, Any] = field(default_factory=dict)


@dataclass
class PolicyCandidate:
    spec: PolicySpec
    note: str
    data_snapshot: str | None = None
    config: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)


class Evolver(Protocol):
    lever: Lever

    def propose(self, ctx: EvolveContext, proposal: Proposal) -> HarnessCandidate | PolicyCandidate: ...
