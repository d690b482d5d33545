"""The judge and the evolver model on the embedded SmolLM2-135M (the default for both): every run is
either scored in [0, 1] with a marked judge signal or left unscored and reported, never made up; the
evolver's candidate keeps every item that was there, whether the model or the distillation wrote it."""

from __future__ import annotations

import httpx
import pytest
from tests.control.conftest import AGENT, base_harness, make_trajectory
from tests.workloads.test_real_model import policy_server  # noqa: F401 (the module-scoped fixture)

from evolvable.control.decision import Proposal
from evolvable.control.evolvers import EvolveContext
from evolvable.control.evolvers.reflective import EvolverModel, SkillEvolver
from evolvable.control.judge import Judge
from evolvable.control.models import Lever
from evolvable.control.statistics import compute_statistics, load_runs
from evolvable.protocol.harness import Skill
from evolvable.protocol.models import SignalKind

pytestmark = pytest.mark.slow


def served_model(url: str) -> str:
    return httpx.get(f"{url}/models", timeout=10).json()["data"][0]["id"]


def test_embedded_model_judges_and_evolves(policy_server: str, sqlite_store) -> None:  # noqa: F811
    model = served_model(policy_server)
    for i in range(4):
        t = make_trajectory(cluster="refund", success=i % 2 == 0, harness_version="h1-a", label="late")
        t.signals = [s for s in t.signals if s.kind != SignalKind.outcome]
        sqlite_store.put_trajectory(t)
    judge = Judge(policy_server, model, max_tokens=60, group_size=4, prefill=True)
    report = judge.judge_pending(sqlite_store, AGENT)
    assert report.judged + len(report.skipped) == 4, report
    assert report.judged >= 1, report  # prefilled, the 135M model does give scores
    for t in sqlite_store.iter_trajectories(_all()):
        judged = [s for s in t.signals if s.kind == SignalKind.judge]
        assert all(0.0 <= s.value <= 1.0 and s.source == f"judge:{model}" for s in judged)
        assert bool(judged) != any(x.startswith(t.id) for x in report.skipped)

    runs = load_runs(sqlite_store, AGENT)
    start = base_harness().model_copy(
        update={"skills": [Skill(name="handle_refund", instructions="- Keep this rule.", applies_to=["refund"])]}
    )
    ctx = EvolveContext(AGENT, sqlite_store, start, "h1-a", runs, compute_statistics(AGENT, runs))
    evolver = SkillEvolver(EvolverModel(policy_server, model, max_tokens=80, timeout_s=300, prefill=True))
    cand = evolver.propose(ctx, Proposal(Lever.skill, "r", "", target={"clusters": ["refund"]}))
    skill = next(s for s in cand.harness.skills if s.name == "handle_refund")
    lines = skill.instructions.splitlines()
    ops = cand.changes["operations"]["refund"]
    assert ops and len(lines) == 1 + sum(1 for op in ops if op["op"] == "add")  # items only added or patched
    if not any(op["op"] == "patch" for op in ops):
        assert lines[0] == "- Keep this rule."
    assert all(f"- {op['text']}" in lines for op in ops if op["op"] == "add")
    assert "written by" in cand.note, cand.note  # prefilled, the 135M model writes a rule


def _all():
    from evolvable.store import TrajectoryFilter

    return TrajectoryFilter(agent=AGENT)
