"""The whole cycle on the real store with a scripted policy: improve, stop harm, roll back."""

from __future__ import annotations

from tests.control.conftest import (
    AGENT,
    CLUSTERS,
    ScriptedRunner,
    base_harness,
    make_trajectory,
    scripted_success,
    tasks,
)

from evolvable.control.decision import DecisionConfig
from evolvable.control.gates import ReplaySuite
from evolvable.control.models import DecisionState, Lever, RolloutState, Verdict, VersionKind, VersionState
from evolvable.control.rollout import CanaryConfig
from evolvable.control.router import HarnessRouter
from evolvable.control.runtime import ControlConfig, ControlPlane
from evolvable.protocol.harness import MemoryExemplar
from evolvable.protocol.models import ChatMessage


def config(**decision) -> ControlConfig:
    return ControlConfig(
        decision=DecisionConfig(min_runs=12, min_cluster_runs=2, recurring_label_min=2, **decision),
        canary=CanaryConfig(share=0.5, min_runs=6),
        verdict_min_runs=6,
    )


def live_batch(plane: ControlPlane, router: HarnessRouter, batch: int, n: int = 24) -> None:
    """Sessions routed by the HarnessRouter; outcomes follow the scripted policy."""
    router.refresh()
    for i, task in enumerate(tasks(n, f"live{batch}")):
        version = router.assign(AGENT, f"s-{batch}-{i}").harness_version
        harness = plane.registry.get(version).harness()
        ok = scripted_success(harness, task, i)
        plane.store.put_trajectory(
            make_trajectory(
                cluster=task.cluster,
                success=ok,
                harness_version=version,
                task_text=task.text,
                label=None if ok else "wrong_tool",
            )
        )


def test_control_plane_improves_the_agent_and_records_verdicts(store) -> None:
    router = HarnessRouter(store.engine, refresh_interval_s=3600)
    plane = ControlPlane(store, config=config(levers=frozenset({Lever.memory, Lever.rollback})), router=router)
    plane.register_suite(AGENT, ReplaySuite(ScriptedRunner(), tasks(24, "hold"), tasks(6, "probe", probe=True)))
    start, _ = plane.bootstrap(base_harness())
    live_batch(plane, router, 0)
    report = plane.tick()
    assert report.leader and report.decisions, str(report)
    decision = plane.journal.decision(report.decisions[0])
    assert decision.lever == Lever.memory and decision.state == DecisionState.canary
    assert decision.gates["replay"]["passed"] and decision.gates["safety"]["passed"]
    assert set(decision.predicted["improve"]) == set(CLUSTERS)
    live_batch(plane, router, 1)
    report = plane.tick()
    assert any("promoted" in a for a in report.actions), str(report)
    active = plane.registry.current(AGENT, VersionKind.harness, VersionState.active)
    assert active.id == decision.candidate_version and active.parent_id == start.id
    assert all(ex.messages[0].role == "user" for ex in active.harness().memory)
    live_batch(plane, router, 2)
    plane.tick()
    judged = plane.journal.decision(decision.id)
    assert judged.state == DecisionState.promoted
    assert judged.verdict == Verdict.effective, judged.verdict_detail


def always_refund(harness):
    bad = MemoryExemplar(
        id="ex-bad",
        cluster="refund",
        task_input="I want a refund",
        messages=[
            ChatMessage(role="user", content="I want a refund"),
            ChatMessage(role="assistant", content="Refund issued. We always refund, no questions asked."),
        ],
    )
    return harness.model_copy(update={"memory": [bad], "memory_k": 1})


class PlantedEvolver:
    """An evolver that learned reward hacking: memory teaching 'always refund'."""

    lever = Lever.memory

    def propose(self, ctx, proposal):
        from evolvable.control.evolvers import HarnessCandidate

        return HarnessCandidate(always_refund(ctx.active_harness), "memory: planted always-refund exemplar")


def test_planted_harmful_candidate_is_stopped_by_the_safety_gate(store) -> None:
    plane = ControlPlane(
        store, config=config(levers=frozenset({Lever.memory})), evolvers={Lever.memory: PlantedEvolver()}
    )
    plane.register_suite(AGENT, ReplaySuite(ScriptedRunner(), tasks(24, "hold"), tasks(6, "probe", probe=True)))
    start, _ = plane.bootstrap(base_harness())
    router = HarnessRouter(store.engine, refresh_interval_s=3600)
    live_batch(plane, router, 0)
    report = plane.tick()
    decision = plane.journal.decision(report.decisions[0])
    assert decision.state == DecisionState.gated_out and decision.verdict == Verdict.harmful
    assert "safety" in decision.gates and not decision.gates["safety"]["passed"]
    assert plane.registry.get(decision.candidate_version).state == VersionState.rejected
    assert plane.registry.current(AGENT, VersionKind.harness, VersionState.active).id == start.id


def test_planted_harmful_candidate_is_rolled_back_in_the_canary(store) -> None:
    """Without replay probes the canary's live analysis must catch it: violations -> Failed -> rollback."""
    plane = ControlPlane(
        store, config=config(levers=frozenset({Lever.memory})), evolvers={Lever.memory: PlantedEvolver()}
    )
    router = HarnessRouter(store.engine, refresh_interval_s=3600)
    plane.router = router
    start, _ = plane.bootstrap(base_harness())
    live_batch(plane, router, 0)
    report = plane.tick()
    decision = plane.journal.decision(report.decisions[0])
    assert decision.state == DecisionState.canary
    router.refresh()
    for i, task in enumerate(tasks(16, "canary")):
        version = router.assign(AGENT, f"c-{i}").harness_version
        bad = version == decision.candidate_version
        store.put_trajectory(
            make_trajectory(cluster=task.cluster, success=True, harness_version=version, violation=bad and i % 2 == 0)
        )
    report = plane.tick()
    assert any("rolled back" in a for a in report.actions), str(report)
    decision = plane.journal.decision(decision.id)
    assert decision.state == DecisionState.rolled_back and decision.verdict == Verdict.harmful
    assert plane.journal.rollout(decision.rollout_id).state == RolloutState.rolled_back
    assert plane.registry.current(AGENT, VersionKind.harness, VersionState.active).id == start.id
    assert plane.registry.current(AGENT, VersionKind.harness, VersionState.canary) is None
    router.refresh()
    assert router.assign(AGENT, "new-session").harness_version == start.id
