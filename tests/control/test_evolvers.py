"""Evolvers on recorded trajectories: exemplars cut from the proxy's record, distilled skills and prompts,
tool descriptions, and a weights lever that says plainly when it cannot run."""

from __future__ import annotations

import pytest
from tests.control.conftest import AGENT, base_harness, make_trajectory

from evolvable.control.decision import Proposal
from evolvable.control.evolvers import EvolveContext, LeverUnavailable
from evolvable.control.evolvers.memory import MemoryEvolver, exemplar_from_trajectory
from evolvable.control.evolvers.reflective import EvolverModel, PromptEvolver, SkillEvolver
from evolvable.control.evolvers.tools import ToolDescriptionEvolver
from evolvable.control.evolvers.weights import UNAVAILABLE, WeightsEvolver
from evolvable.control.exploration import ExplorationReport
from evolvable.control.models import Lever
from evolvable.control.statistics import compute_statistics, load_runs
from evolvable.protocol.harness import MemoryExemplar, render_messages
from evolvable.protocol.models import ChatMessage


def context(store) -> EvolveContext:
    runs = load_runs(store, AGENT)
    return EvolveContext(
        AGENT, store, base_harness(), base_harness().content_hash(), runs, compute_statistics(AGENT, runs)
    )


def record(store, n_ok: int = 2, n_bad: int = 4, **bad) -> None:
    for i in range(n_ok):
        store.put_trajectory(
            make_trajectory(cluster="refund", success=True, harness_version="h1-a", task_text=f"refund order A-{i}")
        )
    for i in range(n_bad):
        store.put_trajectory(
            make_trajectory(
                cluster="refund",
                success=False,
                harness_version="h1-a",
                task_text=f"refund order B-{i}",
                label="wrong_tool",
                **bad,
            )
        )


def test_exemplar_is_the_episode_without_system_prompt_or_injected_exemplars() -> None:
    t = make_trajectory(cluster="refund", success=True, harness_version=None, task_text="where is A-1?")
    ex = exemplar_from_trajectory(t, "refund")
    assert [m.role for m in ex.messages] == ["user", "assistant", "user", "assistant"]
    assert ex.messages[0].content == "where is A-1?" and ex.messages[-1].content == "Your order has shipped."
    assert ex.source_trajectory_id == t.id and ex.reward == 1.0
    # Rendering the exemplar through the shared render_messages puts it before the live conversation, up to
    # the step the conversation is at: its first action on the first turn, all of it on the second.
    harness = base_harness().model_copy(update={"memory": [ex], "memory_k": 1})
    live = [ChatMessage(role="user", content="where is A-2?")]
    msgs = render_messages(harness, live, cluster="refund")
    assert [m.role for m in msgs] == ["system", "user", "assistant", "user"]
    live += [ChatMessage(role="assistant", content="lookup"), ChatMessage(role="user", content="Result: shipped")]
    msgs = render_messages(harness, live, cluster="refund")
    assert [m.role for m in msgs] == ["system", "user", "assistant", "user", "assistant", "user", "assistant", "user"]
    assert msgs[4].content == "Your order has shipped."


def test_memory_evolver_uses_only_clean_successful_runs(sqlite_store) -> None:
    record(sqlite_store)
    sqlite_store.put_trajectory(
        make_trajectory(cluster="refund", success=True, harness_version="h1-a", task_text="refund now", violation=True)
    )
    proposal = Proposal(Lever.memory, "r", "", target={"clusters": ["refund"]})
    cand = MemoryEvolver(per_cluster=5).propose(context(sqlite_store), proposal)
    tasks = {ex.task_input for ex in cand.harness.memory}
    assert tasks == {"refund order A-0", "refund order A-1"}  # the successful run with a violation is not used
    # A request retrieves as many exemplars as the lever adds per cluster, so it sees all of its cluster's.
    assert cand.harness.memory_k == 5 and all(ex.cluster == "refund" for ex in cand.harness.memory)
    with pytest.raises(LeverUnavailable):
        MemoryEvolver().propose(context(sqlite_store), Proposal(Lever.memory, "r", "", target={"clusters": ["x"]}))


def test_skill_is_distilled_from_verifier_feedback_and_successful_tool_sequences(sqlite_store) -> None:
    record(sqlite_store)
    proposal = Proposal(Lever.skill, "r", "", target={"clusters": ["refund"]})
    cand = SkillEvolver().propose(context(sqlite_store), proposal)
    skill = next(s for s in cand.harness.skills if s.name == "handle_refund")
    assert skill.applies_to == ["refund"]
    assert "lookup_order(order_id)" in skill.instructions  # what successful runs did
    assert "Pick the tool that matches the request" in skill.instructions  # the wrong_tool hint
    assert "wrong_tool here" in skill.instructions  # the verifier's own reason
    assert "distilled" in cand.note


def test_unreachable_evolver_model_falls_back_to_distillation(sqlite_store) -> None:
    record(sqlite_store)
    model = EvolverModel(base_url="http://127.0.0.1:9/v1", model="big", timeout_s=0.5)
    cand = PromptEvolver(model).propose(context(sqlite_store), Proposal(Lever.prompt, "r", ""))
    assert "Rules learned from experience:" in cand.harness.system_prompt and "distilled" in cand.note
    kept = cand.harness.model_copy(
        update={"system_prompt": cand.harness.system_prompt + "\n- A rule that worked before."}
    )
    with pytest.raises(LeverUnavailable, match="nothing new"):  # the same evidence adds nothing the second time
        PromptEvolver().propose(
            EvolveContext(
                AGENT, sqlite_store, cand.harness, "x", context(sqlite_store).runs, context(sqlite_store).stats
            ),
            Proposal(Lever.prompt, "r", ""),
        )
    for i in range(3):  # new evidence: rules are appended, none dropped
        sqlite_store.put_trajectory(
            make_trajectory(
                cluster="refund", success=False, harness_version="h1-a", task_text=f"C-{i}", label="no_reply"
            )
        )
    again = PromptEvolver().propose(
        EvolveContext(AGENT, sqlite_store, kept, "x", context(sqlite_store).runs, context(sqlite_store).stats),
        Proposal(Lever.prompt, "r", ""),
    )
    assert again.harness.system_prompt.count("Rules learned from experience:") == 1
    assert "- A rule that worked before." in again.harness.system_prompt
    assert "- Always finish with a reply to the user." in again.harness.system_prompt
    assert all(line in again.harness.system_prompt for line in cand.harness.system_prompt.splitlines())


def test_tool_description_targets_the_argument_error(sqlite_store) -> None:
    record(sqlite_store, tool_error="InvalidArguments")
    proposal = Proposal(
        Lever.tool, "r", "", target={"tool": "lookup_order"}, evidence={"errors": {"missing argument order_id": 4}}
    )
    cand = ToolDescriptionEvolver().propose(context(sqlite_store), proposal)
    desc = cand.harness.tool("lookup_order").description
    assert "order_id (string, required)" in desc
    assert '"order_id": "A-1"' in desc  # an example from a successful call
    assert "missing argument order_id" in desc


def test_weights_lever_says_plainly_when_no_trainer(sqlite_store, monkeypatch) -> None:
    import sys

    # As if the trainer were not installed: the package and any submodule earlier tests imported.
    for name in [n for n in sys.modules if n == "evolvable.trainer" or n.startswith("evolvable.trainer.")]:
        monkeypatch.setitem(sys.modules, name, None)
    for name in ("evolvable.trainer", "evolvable.trainer.config", "evolvable.trainer.loop"):
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(LeverUnavailable, match=UNAVAILABLE):
        WeightsEvolver().propose(context(sqlite_store), Proposal(Lever.weights, "r", ""))


def test_memory_evolver_borrows_tool_using_successes_as_format_exemplars(sqlite_store) -> None:
    record(sqlite_store, n_ok=3, n_bad=0)
    ctx = context(sqlite_store)
    assert all(r.tool_calls for r in ctx.runs)
    proposal = Proposal(Lever.memory, "format", "", target={"clusters": ["orders"], "donors": ["refund"]})
    cand = MemoryEvolver(per_cluster=2).propose(ctx, proposal)
    assert len(cand.harness.memory) == 2
    assert all(ex.cluster is None for ex in cand.harness.memory)  # retrieved for any task, not one cluster
    assert cand.harness.memory_k >= 1
    with pytest.raises(LeverUnavailable, match="tool-using"):
        MemoryEvolver().propose(ctx, Proposal(Lever.memory, "format", "", target={"clusters": ["x"], "donors": ["y"]}))


class FakeExplorer:
    """Rebuilds `task-*` ids and 'solves' the tasks whose id ends in an even digit."""

    def __init__(self) -> None:
        self.explored: list[str] = []

    def run(self, harness, policy, tasks):  # a ReplayRunner too
        return []

    def recorded_task(self, task_id: str, cluster: str):
        return (task_id, cluster) if task_id.startswith("task-") else None

    def explore(self, harness, policy, tasks):
        self.explored += [t[0] for t in tasks]
        found = [
            MemoryExemplar(
                id=f"ex-{tid}",
                cluster=cluster,
                task_input=tid,
                messages=[ChatMessage(role="user", content=tid), ChatMessage(role="assistant", content="done")],
            )
            for tid, cluster in tasks
            if int(tid[-1]) % 2 == 0
        ]
        return ExplorationReport(exemplars=found, tasks=len(tasks), episodes=3 * len(tasks))


class FruitlessExplorer(FakeExplorer):
    def explore(self, harness, policy, tasks):
        return ExplorationReport(exemplars=[], tasks=len(tasks), episodes=7)


def test_memory_evolver_explores_recorded_failed_tasks_when_no_success_exists(sqlite_store) -> None:
    from evolvable.control.gates import ReplaySuite

    for i in range(5):
        t = make_trajectory(cluster="refund", success=False, harness_version="h1-a", task_text=f"refund {i}")
        sqlite_store.put_trajectory(t.model_copy(update={"task_id": f"task-{i}" if i else "unrebuildable"}))
    explorer = FakeExplorer()
    ctx = context(sqlite_store)
    ctx.suite = ReplaySuite(explorer, holdout=[])
    proposal = Proposal(Lever.memory, "explore", "", target={"clusters": ["refund"], "explore": True})
    cand = MemoryEvolver(per_cluster=2, explore_tasks=3).propose(ctx, proposal)
    assert len(explorer.explored) == 3 and all(tid.startswith("task-") for tid in explorer.explored)
    assert [ex.id for ex in cand.harness.memory] == [f"ex-{tid}" for tid in explorer.explored if int(tid[-1]) % 2 == 0]
    assert cand.changes["exploration"]["tasks"] == 3 and cand.harness.memory_k == 2
    # Nothing solved: the lever says so instead of proposing an empty change.
    ctx.suite = ReplaySuite(FruitlessExplorer(), holdout=[])
    with pytest.raises(LeverUnavailable, match="no verified success"):
        MemoryEvolver().propose(ctx, proposal)
    ctx.suite = None
    with pytest.raises(LeverUnavailable, match="replay runner that can explore"):
        MemoryEvolver().propose(ctx, proposal)
