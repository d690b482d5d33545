"""The evolution control plane: registry, statistics, lever decision, evolvers, gates, canary, runtime.

    plane = ControlPlane(store, router=HarnessRouter(store.engine))
    plane.bootstrap(harness, PolicySpec(base_model="smollm2-135m"))
    plane.tick()     # statistics -> decision -> evolve -> gates -> canary -> verdicts

See docs/control_plane.md.
"""

from evolvable.control.api import create_control_router
from evolvable.control.decision import DecisionConfig
from evolvable.control.gates import GateConfig, ReplayRunner, ReplaySuite, TaskOutcome
from evolvable.control.journal import Journal
from evolvable.control.models import (
    Decision,
    DecisionState,
    Lever,
    PolicySpec,
    Rollout,
    RolloutState,
    Verdict,
    VersionKind,
    VersionRecord,
    VersionState,
)
from evolvable.control.registry import Registry, diff_harnesses
from evolvable.control.rollout import CanaryConfig
from evolvable.control.router import HarnessRouter
from evolvable.control.runtime import ControlConfig, ControlPlane, TickReport

__all__ = [
    "CanaryConfig",
    "ControlConfig",
    "ControlPlane",
    "Decision",
    "DecisionConfig",
    "DecisionState",
    "GateConfig",
    "HarnessRouter",
    "Journal",
    "Lever",
    "PolicySpec",
    "Registry",
    "ReplayRunner",
    "ReplaySuite",
    "Rollout",
    "RolloutState",
    "TaskOutcome",
    "TickReport",
    "Verdict",
    "VersionKind",
    "VersionRecord",
    "VersionState",
    "create_control_router",
    "diff_harnesses",
]
