"""Nothing is half-applied: a gate that raises, a tick past its time budget, a decision cut off by a dying
leader — each decision records why, and its candidate never reaches live traffic."""

from __future__ import annotations

import time
from collections.abc import Sequence

from tests.control.conftest import AGENT, ScriptedRunner, base_harness, tasks
from tests.control.test_runtime import config, live_batch

from evolvable.control.gates import ReplaySuite, TaskOutcome
from evolvable.control.models import DecisionState, Lever, PolicySpec, VersionKind, VersionState
from evolvable.control.router import HarnessRouter
from evolvable.control.runtime import ControlPlane
from evolvable.protocol.harness import Harness


class BrokenRunner:
    def run(self, harness: Harness, policy: PolicySpec | None, tasks: Sequence[object]) -> list[TaskOutcome]:
        raise RuntimeError("replay service unreachable")


class SlowRunner(ScriptedRunner):
    def run(self, harness: Harness, policy: PolicySpec | None, tasks: Sequence[object]) -> list[TaskOutcome]:
        time.sleep(0.3)
        return super().run(harness, policy, tasks)


def plane_with(store, runner, **settings) -> tuple[ControlPlane, HarnessRouter]:
    router = HarnessRouter(store.engine, refresh_interval_s=3600)
    cfg = config(levers=frozenset({Lever.memory, Lever.rollback}))
    for key, value in settings.items():
        setattr(cfg, key, value)
    plane = ControlPlane(store, config=cfg, router=router)
    plane.register_suite(AGENT, ReplaySuite(runner, tasks(12, "hold"), tasks(3, "probe", probe=True)))
    plane.bootstrap(base_harness())
    live_batch(plane, router, 0)
    return plane, router


def assert_nothing_served(plane: ControlPlane, candidate: str, state: VersionState = VersionState.candidate) -> None:
    assert plane.registry.get(candidate).state == state
    assert plane.registry.current(AGENT, VersionKind.harness, VersionState.canary) is None
    assert not plane.journal.rollouts(AGENT)


def test_a_gate_that_raises_is_recorded_and_nothing_is_served(store) -> None:
    plane, _ = plane_with(store, BrokenRunner())
    report = plane.tick()
    decision = plane.journal.decision(report.decisions[0])
    # A replay that cannot run says nothing about the candidate: it is stopped, with the reason on record.
    assert decision.state == DecisionState.gated_out
    assert "replay service unreachable" in decision.gates["replay"]["reason"]
    assert_nothing_served(plane, decision.candidate_version, VersionState.rejected)


def test_past_the_time_budget_the_decision_fails_before_any_canary(store) -> None:
    plane, _ = plane_with(store, SlowRunner(), time_budget_s=0.1)
    report = plane.tick()
    decision = plane.journal.decision(report.decisions[0])
    assert decision.state == DecisionState.failed and "time budget" in decision.gates["budget"]
    assert_nothing_served(plane, decision.candidate_version)


def test_a_decision_cut_off_by_a_dying_leader_is_abandoned_then_redone(store) -> None:
    plane, _ = plane_with(store, ScriptedRunner())
    # The old leader recorded a decision, registered its candidate and started its canary, then died.
    cand = plane.registry.register_harness(base_harness().model_copy(update={"system_prompt": "half-way"}))
    plane.registry.start_canary(cand.id)
    cut = plane.journal.record_decision(AGENT, Lever.memory, evidence={"leader": "replica-a"})
    plane.journal.update_decision(cut.id, candidate_kind=VersionKind.harness, candidate_version=cand.id)
    report = plane.tick()  # a new leader's first tick
    cut = plane.journal.decision(cut.id)
    assert cut.state == DecisionState.failed and "replica-a" in cut.gates["interrupted"]
    assert plane.registry.get(cand.id).state == VersionState.candidate  # its canary slot is free again
    redone = [plane.journal.decision(d) for d in report.decisions]
    assert redone and redone[0].state == DecisionState.canary  # the new leader decided afresh, once
    assert len(plane.journal.decisions(AGENT)) == 2
