"""The judge on its own: relative group scores, fallback to one-by-one, and nothing made up when the
judge model answers garbage or is unreachable."""

from __future__ import annotations

import json

import pytest
from tests.control.conftest import AGENT, make_trajectory
from tests.workloads.mock_openai import MockOpenAI

from evolvable.control.judge import Judge, JudgeScore, JudgeUnusable, judge_agreement, judge_from_settings
from evolvable.control.statistics import load_runs
from evolvable.protocol.models import TrajectoryStatus


def unjudged(store, n: int, success: bool = False) -> list[str]:
    """Ended runs with no outcome (the verifier's outcome signal removed), as an agent with no verifier leaves them."""
    ids = []
    for _ in range(n):
        t = make_trajectory(cluster="c", success=success, harness_version=None)
        t.signals = []
        t.status = TrajectoryStatus.completed
        store.put_trajectory(t)
        ids.append(t.id)
    return ids


def test_group_reply_scores_every_run_relative_to_the_others(store) -> None:
    def reply(messages):
        n = messages[-1]["content"].count("### Run")
        return json.dumps({"scores": [{"run": i, "score": i / n, "reason": f"rank {i}"} for i in range(1, n + 1)]})

    ids = unjudged(store, 3)
    with MockOpenAI(reply) as server:
        report = Judge(server.base_url, "j").judge_pending(store, AGENT)
        assert len(server.chat_requests) == 1  # one prompt for the whole cluster
    assert report.judged == 3 and not report.skipped
    scores = sorted(store.get_trajectory(i).signals[0].value for i in ids)
    assert scores == pytest.approx([1 / 3, 2 / 3, 1.0])
    runs = load_runs(store, AGENT)
    assert [r.success_source for r in runs] == ["judge"] * 3
    assert sum(1 for r in runs if r.success) == 2


def test_unusable_group_reply_falls_back_to_one_by_one_and_skips_garbage(store) -> None:
    def reply(messages):
        prompt = messages[-1]["content"]
        if "### Run" in prompt:
            return '{"scores": [{"run": 1, "score": 0.5}]}'  # too few entries
        if "good answer" in prompt:
            return 'Sure! {"score": 0.9, "reason": "fine"}'
        return "I think it is fine"  # no JSON at all

    good = make_trajectory(cluster="c", success=True, harness_version=None)
    good.signals = []
    good.steps[0].choices[0].message.content = "good answer"
    store.put_trajectory(good)
    bad = unjudged(store, 1)[0]
    with MockOpenAI(reply) as server:
        report = Judge(server.base_url, "j").judge_pending(store, AGENT)
    assert report.judged == 1 and len(report.skipped) == 1 and report.skipped[0].startswith(bad)
    assert store.get_trajectory(good.id).signals[0].value == 0.9
    assert store.get_trajectory(bad).signals == []  # nothing made up
    with MockOpenAI(reply) as server:  # the skipped run is tried again next time, the judged one is not
        again = Judge(server.base_url, "j").judge_pending(store, AGENT)
    assert again.judged == 0 and len(again.skipped) == 1


@pytest.mark.parametrize("answer", ['{"score": 1.5}', '{"score": "high"}', '{"score": true}', "[0.5]"])
def test_out_of_range_or_mistyped_scores_are_refused(answer: str) -> None:
    with MockOpenAI(lambda messages: answer) as server, pytest.raises(JudgeUnusable):
        Judge(server.base_url, "j").score_one(AGENT, "Task: x")


def test_an_unreachable_judge_is_unusable_not_fatal(sqlite_store) -> None:
    unjudged(sqlite_store, 2)
    report = Judge("http://127.0.0.1:9/v1", "j", timeout_s=2).judge_pending(sqlite_store, AGENT)
    assert report.judged == 0 and len(report.skipped) == 2 and "judge call failed" in report.skipped[0]


def test_agreement_with_posted_outcomes_is_measured(sqlite_store) -> None:
    judge = Judge("http://127.0.0.1:9/v1", "j")
    for success, score in [(True, 0.9), (True, 0.2), (False, 0.1), (False, 0.0)]:
        t = make_trajectory(cluster="c", success=success, harness_version=None)
        t.signals += judge.signals_for(t, JudgeScore(score), 4)
        sqlite_store.put_trajectory(t)
    runs = load_runs(sqlite_store, AGENT)
    assert all(r.success_source == "outcome" for r in runs)  # an outcome always wins over the judge
    assert sorted(r.success for r in runs) == [False, False, True, True]
    assert judge_agreement(runs) == {
        "judged": 4,
        "with_outcome": 4,
        "agreement": 0.75,
        "success_sources": {"outcome": 4},
    }


def test_status_shows_the_judges_agreement(tmp_path) -> None:
    from tests.control.conftest import base_harness
    from typer.testing import CliRunner

    from evolvable.cli.main import app
    from evolvable.control.runtime import ControlPlane
    from evolvable.store import Store

    url = f"sqlite:///{tmp_path / 'status.db'}"
    store = Store.open(url)
    active, _ = ControlPlane(store).bootstrap(base_harness())
    judge = Judge("http://127.0.0.1:9/v1", "j")
    for success, score in [(True, 0.9), (False, 0.8)]:
        t = make_trajectory(cluster="c", success=success, harness_version=active.id)
        t.signals += judge.signals_for(t, JudgeScore(score), 2)
        store.put_trajectory(t)
    store.close()
    out = CliRunner().invoke(app, ["status", "--db", url])
    assert out.exit_code == 0, out.output
    assert "agrees with outcomes on 50% of 2" in out.output and "success from outcome 2" in out.output


def test_settings_build_a_judge() -> None:
    judge = judge_from_settings({"base_url": "http://x/v1", "model": "m", "rubrics": {AGENT: "be kind"}})
    assert judge.rubric_for(AGENT) == "be kind" and judge.rubric_for("other").startswith("A run is good")
    with pytest.raises(ValueError, match="'model'"):
        judge_from_settings({"base_url": "http://x/v1"})


@pytest.mark.parametrize(
    ("continuation", "score", "reason"),
    [('0.75, "reason": "close"}', 0.75, "close"), ("1 because it worked", 1.0, "because it worked")],
)
def test_a_prefilled_judge_reads_the_number_the_model_continued_with(continuation, score, reason) -> None:
    with MockOpenAI(lambda messages: continuation) as server:
        judged = Judge(server.base_url, "small", prefill=True).score_one(AGENT, "Task: x")
        request = server.chat_requests[0]
    assert (judged.score, judged.reason) == (score, reason)
    assert request["messages"][-1] == {"role": "assistant", "content": '{"score": '}
    assert request["continue_final_message"] is True and request["add_generation_prompt"] is False


def test_a_prefilled_judge_still_refuses_a_continuation_that_is_no_score() -> None:
    with MockOpenAI(lambda messages: "maybe good") as server, pytest.raises(JudgeUnusable, match="continued"):
        Judge(server.base_url, "small", prefill=True).score_one(AGENT, "Task: x")


def test_a_prefilled_judge_ranks_runs_one_call_each_seeing_all(sqlite_store) -> None:
    ids = unjudged(sqlite_store, 3)
    with MockOpenAI(lambda messages: "0.4}") as server:
        report = Judge(server.base_url, "small", prefill=True).judge_pending(sqlite_store, AGENT)
        prompts = [r["messages"][1]["content"] for r in server.chat_requests]
    assert report.judged == 3 and len(prompts) == 3
    assert all(p.count("### Run") == 3 for p in prompts) and "score run 3" in prompts[2]
    assert [sqlite_store.get_trajectory(i).signals[0].value for i in ids] == [0.4, 0.4, 0.4]
