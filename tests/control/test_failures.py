"""Nothing is half-applied: a gate that raises, a tick past its time budget, a decision cut off by a dying
leader — each decision records why, and its candidate never reaches live traffic."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from tests.control.conftest import AGENT, ScriptedRunner, base_harness, tasks
from tests.control.test_runtime import config, live_batch

from evolvable.control.decision import Proposal
from evolvable.control.evolvers import EvolveContext, HarnessCandidate
from evolvable.control.gates import ReplaySuite, TaskOutcome
from evolvable.control.models import DecisionState, Lever, PolicySpec, VersionKind, VersionState
from evolvable.control.router import HarnessRouter
from evolvable.control.runtime import ControlPlane
from evolvable.protocol.harness import Harness


class BrokenRunner:
    def run(self, harness: Harness, policy: PolicySpec | None, tasks: Sequence[object]) -> list[TaskOutcome]:
        raise RuntimeError("replay service unreachable")


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


class HangingRunner(ScriptedRunner):
    """A replay service that answers long after any budget."""

    def __init__(self, delay_s: float) -> None:
        super().__init__()
        self.delay_s = delay_s
        self.finished = threading.Event()

    def run(self, harness: Harness, policy: PolicySpec | None, tasks: Sequence[object]) -> list[TaskOutcome]:
        time.sleep(self.delay_s)
        try:
            return super().run(harness, policy, tasks)
        finally:
            self.finished.set()


class HangingEvolver:
    """An evolver that would produce a candidate, but only long after the budget; it honours `cancel`."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self.stopped = threading.Event()

    def propose(self, ctx: EvolveContext, proposal: Proposal) -> HarnessCandidate:
        ctx.cancel.wait(self.delay_s)
        self.stopped.set()
        return HarnessCandidate(ctx.active_harness.model_copy(update={"system_prompt": "too late"}), "late")


def test_a_gate_running_past_the_budget_is_stopped_there(store) -> None:
    runner = HangingRunner(delay_s=8.0)
    plane, _ = plane_with(store, runner, time_budget_s=2.0)  # the evolver (no model) fits even on a loaded machine
    started = time.monotonic()
    report = plane.tick()
    assert time.monotonic() - started < 6  # the tick stopped waiting for the gate at the budget
    decision = plane.journal.decision(report.decisions[0])
    assert decision.state == DecisionState.failed and "timed out" in decision.gates["budget"]
    assert "gates of" in decision.gates["budget"] and "nothing was applied" in decision.gates["budget"]
    assert_nothing_served(plane, decision.candidate_version)
    # While the abandoned gate still runs, the agent gets no new decision; once it ends, nothing of it lands.
    again = plane.tick()
    assert not again.decisions and any("winding down" in a for a in again.actions)
    assert runner.finished.wait(30)
    time.sleep(0.2)
    assert_nothing_served(plane, decision.candidate_version)
    assert plane.journal.decision(decision.id).state == DecisionState.failed


def test_an_evolver_running_past_the_budget_is_cancelled_and_registers_nothing(store) -> None:
    plane, _ = plane_with(store, ScriptedRunner(), time_budget_s=1.0)
    evolver = HangingEvolver(delay_s=30.0)
    plane.evolvers[Lever.memory] = evolver
    versions = len(plane.registry.versions(AGENT))
    started = time.monotonic()
    report = plane.tick()
    assert time.monotonic() - started < 10
    decision = plane.journal.decision(report.decisions[0])
    assert decision.state == DecisionState.failed and "memory evolver" in decision.gates["budget"]
    assert decision.candidate_version is None
    assert evolver.stopped.wait(5)  # the cancel event reached it: it stopped long before its 30 s
    time.sleep(0.2)
    assert len(plane.registry.versions(AGENT)) == versions  # its late candidate was never registered
    assert plane.registry.current(AGENT, VersionKind.harness, VersionState.canary) is None


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
