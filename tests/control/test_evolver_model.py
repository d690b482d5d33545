"""The evolver model: itemised add/patch playbook edits (ACE) from the Pareto-front parent (GEPA),
with the general distillation as fallback; tested against a scripted OpenAI-compatible server."""

from __future__ import annotations

import json

import pytest
from tests.control.conftest import AGENT, base_harness, make_trajectory
from tests.workloads.mock_openai import MockOpenAI

from evolvable.control.decision import Proposal
from evolvable.control.evolvers import EvolveContext
from evolvable.control.evolvers.pareto import cluster_rates, parent_for, pareto_front
from evolvable.control.evolvers.playbook import Playbook
from evolvable.control.evolvers.reflective import (
    RULES_HEADER,
    EvolverModel,
    PromptEvolver,
    SkillEvolver,
    evolver_model_from_settings,
)
from evolvable.control.models import Lever, VersionState
from evolvable.control.registry import Registry
from evolvable.control.statistics import RunSummary, compute_statistics, load_runs
from evolvable.protocol.harness import Skill


def run(version: str, cluster: str, success: bool) -> RunSummary:
    from datetime import UTC, datetime

    return RunSummary("t", AGENT, cluster, "", None, version, None, datetime.now(UTC), success, None)


def test_playbook_only_adds_and_patches() -> None:
    book = Playbook.from_prompt("Base.\n\nRules:\n- one\n- two", "Rules:")
    applied, refused = book.apply(
        [
            {"op": "add", "text": "three"},
            {"op": "patch", "item": 1, "text": "one, better"},
            {"op": "remove", "item": 2, "text": "x"},
            {"op": "patch", "item": 9, "text": "nope"},
            {"op": "add", "text": "two"},
            {"op": "add"},
            "garbage",
        ]
    )
    assert book.items == ["one, better", "two", "three"]
    assert len(applied) == 2 and len(refused) == 5
    assert book.render_prompt("Rules:") == "Base.\n\nRules:\n- one, better\n- two\n- three"
    assert Playbook.from_skill("free text from before").items == ["free text from before"]
    assert book.apply("not a list") == ([], ["operations is not a list"])


def test_pareto_front_keeps_a_version_best_on_one_cluster() -> None:
    runs = [run("A", "x", True)] * 4 + [run("A", "y", False)] * 4
    runs += [run("B", "x", False)] * 4 + [run("B", "y", True)] * 4
    runs += [run("C", "x", False)] * 4 + [run("C", "y", False)] * 4  # dominated by both
    rates = cluster_rates(runs)
    front = pareto_front(rates)
    assert front == {"A": ["x"], "B": ["y"]}
    assert parent_for(front, rates, "y", active="A") == "B"
    assert parent_for(front, rates, "x", active="A") == "A"
    assert parent_for(front, rates, None, active="C") in {"A", "B"}


def ops_reply(ops: list[dict]) -> str:
    return "Here you go: " + json.dumps({"operations": ops})


def failing_runs(store, version: str, cluster: str = "refund", n: int = 4) -> None:
    for i in range(n):
        store.put_trajectory(
            make_trajectory(cluster=cluster, success=False, harness_version=version, task_text=f"t{i}", label="late")
        )


def test_skill_edits_come_from_the_model_and_start_from_the_front_parent(sqlite_store) -> None:
    registry = Registry(sqlite_store.engine)
    earlier = base_harness().model_copy(
        update={"skills": [Skill(name="handle_refund", instructions="- Check the state first.", applies_to=["refund"])]}
    )
    old = registry.register_harness(earlier)
    active = registry.register_harness(base_harness(), state=VersionState.active)
    for _ in range(4):  # the earlier version did well on the cluster, the active one does not
        sqlite_store.put_trajectory(make_trajectory(cluster="refund", success=True, harness_version=old.id))
    failing_runs(sqlite_store, active.id)
    runs = load_runs(sqlite_store, AGENT)
    ctx = EvolveContext(AGENT, sqlite_store, base_harness(), active.id, runs, compute_statistics(AGENT, runs))
    reply = ops_reply([{"op": "add", "text": "Confirm before acting."}, {"op": "patch", "item": 1, "text": "x"}])
    with MockOpenAI(lambda messages: reply) as server:
        model = EvolverModel(server.base_url, "evolver")
        cand = SkillEvolver(model).propose(ctx, Proposal(Lever.skill, "r", "", target={"clusters": ["refund"]}))
        prompt = server.chat_requests[0]["messages"][1]["content"]
    assert "1. Check the state first." in prompt and "late here" in prompt  # the parent's items, the reasons
    skill = cand.harness.skills[0]
    assert skill.instructions == "- x\n- Confirm before acting."
    assert cand.changes["parents"]["refund"] == old.id and "written by evolver" in cand.note


def test_unusable_model_answers_fall_back_to_general_distillation(sqlite_store) -> None:
    failing_runs(sqlite_store, "h1-a")
    runs = load_runs(sqlite_store, AGENT)
    ctx = EvolveContext(AGENT, sqlite_store, base_harness(), "h1-a", runs, compute_statistics(AGENT, runs))
    for reply in ["no json here", ops_reply([{"op": "rewrite", "text": "everything new"}])]:
        with MockOpenAI(lambda messages, r=reply: r) as server:
            cand = PromptEvolver(EvolverModel(server.base_url, "evolver")).propose(ctx, Proposal(Lever.prompt, "r", ""))
        assert cand.note == "prompt (distilled)"
        assert cand.harness.system_prompt.startswith(base_harness().system_prompt + "\n\n" + RULES_HEADER)
        assert "Feedback on failed runs: late here" in cand.harness.system_prompt


def test_evolver_settings() -> None:
    model = evolver_model_from_settings({"base_url": "http://x/v1", "model": "m", "timeout_s": 5})
    assert model.model == "m" and model.timeout_s == 5.0 and model.api_key == "not-needed"
    with pytest.raises(ValueError, match="'base_url'"):
        evolver_model_from_settings({"model": "m"})


def test_a_prefilled_evolver_model_keeps_the_rule_it_started(sqlite_store) -> None:
    failing_runs(sqlite_store, "h1-a")
    runs = load_runs(sqlite_store, AGENT)
    ctx = EvolveContext(AGENT, sqlite_store, base_harness(), "h1-a", runs, compute_statistics(AGENT, runs))
    with MockOpenAI(lambda messages: 'Confirm the user id before acting." and then some') as server:
        model = EvolverModel(server.base_url, "small", prefill=True)
        cand = PromptEvolver(model).propose(ctx, Proposal(Lever.prompt, "r", ""))
        assert server.chat_requests[0]["continue_final_message"] is True
    assert cand.note == "prompt (written by small)"
    assert cand.harness.system_prompt.endswith("- Confirm the user id before acting.")
