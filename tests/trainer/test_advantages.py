"""Credit assignment without groups: baselines, discounting, step signals, replay groups."""

from __future__ import annotations

import pytest

from evolvable.protocol.models import (
    ChatMessage,
    CompletionChoice,
    FunctionCall,
    LLMCallStep,
    MessageStep,
    Signal,
    ToolCall,
    ToolCallStep,
    Trajectory,
)
from evolvable.trainer.advantages import (
    DEFAULT_CLUSTER,
    Episode,
    RunningBaselines,
    compute_turn_advantages,
    discounted_returns,
    episode_from_trajectory,
    token_advantages,
)


def test_discounted_returns_backwards_over_turns() -> None:
    assert discounted_returns([0.0, 0.0, 0.0], 1.0, 0.5) == pytest.approx([0.25, 0.5, 1.0])
    assert discounted_returns([-0.5, 0.0, 0.0], 1.0, 1.0) == pytest.approx([0.5, 1.0, 1.0])
    assert discounted_returns([0.0, 0.2], 0.0, 0.9) == pytest.approx([0.18, 0.2])


def test_running_baseline_is_an_ema_and_round_trips() -> None:
    b = RunningBaselines(rate=0.5)
    b.update("refund", 1.0)
    assert b.get("refund") == 1.0  # the first observation initialises
    b.update("refund", 0.0)
    assert b.get("refund") == pytest.approx(0.5)
    b.update("refund", 0.0)
    assert b.get("refund") == pytest.approx(0.25)
    restored = RunningBaselines()
    restored.load_state_dict(b.state_dict())
    assert restored.means == b.means and restored.counts == {"refund": 3} and restored.rate == 0.5


def _call(text: str, tool_call_id: str | None = None) -> LLMCallStep:
    tool_calls = [ToolCall(id=tool_call_id, function=FunctionCall(name="lookup"))] if tool_call_id else None
    return LLMCallStep(
        prompt_token_ids=[1],
        choices=[
            CompletionChoice(
                message=ChatMessage(role="assistant", content=text, tool_calls=tool_calls),
                completion_token_ids=[2],
                logprobs=[-1.0],
            )
        ],
    )


def test_step_signals_land_on_the_turn_they_concern() -> None:
    first = _call("look it up", tool_call_id="call_1")
    failing_tool = ToolCallStep(tool_name="lookup", status="error", tool_call_id="call_1")  # linked by tool_call_id
    second = _call("done")
    explicit_tool = ToolCallStep(tool_name="refund", status="error", llm_step_id=second.id)
    feedback = MessageStep(role="user", content="thanks, that was wrong though")
    t = Trajectory(
        status="completed",
        metadata={"intent": "refund"},
        steps=[first, failing_tool, second, explicit_tool, feedback],
        signals=[
            Signal(kind="outcome", value=1.0),
            Signal(kind="tool_error", value=1.0, step_id=explicit_tool.id),  # charged once, not twice
            Signal(kind="user_feedback", value=-1.0, step_id=feedback.id),  # nearest llm_call before it
            Signal(kind="process", value=1.0, step_id=first.id, confidence=0.5),
        ],
    )
    ep = episode_from_trajectory(t, [first.id, second.id], process_coef=0.5, tool_error_penalty=0.5)
    assert ep.cluster == "refund" and ep.outcome == 1.0
    # first: implicit tool error -0.5, process +0.5 * 1 * 0.5
    assert ep.turn_rewards[first.id] == pytest.approx(-0.5 + 0.25)
    # second: explicit tool error -0.5, user feedback 0.5 * -1
    assert ep.turn_rewards[second.id] == pytest.approx(-0.5 - 0.5)


def test_signals_on_dropped_turns_are_ignored_and_verifier_backs_up_outcome() -> None:
    orphan, kept = _call("retry me"), _call("answer")
    t = Trajectory(
        status="completed",
        steps=[orphan, kept],
        signals=[Signal(kind="verifier", value=0.7), Signal(kind="process", value=-1.0, step_id=orphan.id)],
    )
    ep = episode_from_trajectory(t, [kept.id])
    assert ep.outcome == pytest.approx(0.7)
    assert ep.turn_rewards == {}
    assert ep.cluster == DEFAULT_CLUSTER


def test_prior_cluster_baseline_is_used_then_updated() -> None:
    baselines = RunningBaselines(rate=0.5, means={"a": 0.25})
    eps = [Episode("t1", "a", None, 1.0, ["s1", "s2"]), Episode("t2", "a", None, 0.0, ["s3"])]
    adv = compute_turn_advantages(eps, baselines, gamma=0.5)
    assert adv["t1"] == pytest.approx({"s1": 0.5 * (1.0 - 0.25), "s2": 0.75})
    assert adv["t2"] == pytest.approx({"s3": -0.25})
    # EMA: 0.25 -> 0.625 -> 0.3125
    assert baselines.get("a") == pytest.approx(0.3125)


def test_process_gamma_keeps_step_judgements_on_their_own_turn() -> None:
    # Three turns: the first right (+0.5), the next two wrong (-0.5 each); outcome 0, baseline 0.25.
    rewards = {"s1": 0.5, "s2": -0.5, "s3": -0.5}
    ep = Episode("t1", "a", None, 0.0, ["s1", "s2", "s3"], turn_rewards=rewards)
    summed = compute_turn_advantages([ep], RunningBaselines(means={"a": 0.25}), gamma=1.0)
    # gamma 1 for both: the first turn carries every later penalty: 0.5 - 0.5 - 0.5 - 0.25
    assert summed["t1"] == pytest.approx({"s1": -0.75, "s2": -1.25, "s3": -0.75})
    own = compute_turn_advantages([ep], RunningBaselines(means={"a": 0.25}), gamma=1.0, process_gamma=0.0)
    # process_gamma 0: each turn keeps its own judgement, the outcome's advantage (-0.25) goes to all
    assert own["t1"] == pytest.approx({"s1": 0.25, "s2": -0.75, "s3": -0.75})
    half = compute_turn_advantages([ep], RunningBaselines(means={"a": 0.25}), gamma=0.5, process_gamma=0.0)
    assert half["t1"] == pytest.approx({"s1": 0.5 - 0.25 * 0.25, "s2": -0.5 - 0.5 * 0.25, "s3": -0.75})


def test_negative_scale_shrinks_only_negative_advantages() -> None:
    rewards = {"s1": 0.5, "s2": -0.5}
    eps = [Episode("t1", "a", None, 0.0, ["s1", "s2"], turn_rewards=rewards)]
    adv = compute_turn_advantages(eps, RunningBaselines(means={"a": 0.25}), process_gamma=0.0, negative_scale=0.5)
    # unscaled: s1 = 0.5 - 0.25 = 0.25 (kept), s2 = -0.5 - 0.25 = -0.75 (halved)
    assert adv["t1"] == pytest.approx({"s1": 0.25, "s2": -0.375})
    none = compute_turn_advantages(eps, RunningBaselines(means={"a": 0.25}), process_gamma=0.0, negative_scale=0.0)
    assert none["t1"] == pytest.approx({"s1": 0.25, "s2": 0.0})


def test_unseen_cluster_uses_leave_one_out_then_batch() -> None:
    baselines = RunningBaselines()
    eps = [
        Episode("t1", "a", None, 1.0, ["s1"]),
        Episode("t2", "a", None, 0.0, ["s2"]),
        Episode("t3", "a", None, 0.5, ["s3"]),
        Episode("t4", "b", None, 1.0, ["s4"]),  # alone in its cluster: leave-one-out over the batch
    ]
    adv = compute_turn_advantages(eps, baselines)
    assert adv["t1"]["s1"] == pytest.approx(1.0 - 0.25)
    assert adv["t2"]["s2"] == pytest.approx(0.0 - 0.75)
    assert adv["t4"]["s4"] == pytest.approx(1.0 - 0.5)
    assert set(baselines.means) == {"a", "b"}


def test_replay_groups_use_their_own_mean() -> None:
    baselines = RunningBaselines(means={"a": 0.9})
    eps = [
        Episode("r1", "a", "task-7", 1.0, ["s1"]),
        Episode("r2", "a", "task-7", 0.0, ["s2"]),
        Episode("r3", "a", "task-7", 0.0, ["s3"]),
        Episode("live", "a", "task-8", 1.0, ["s4"]),
    ]
    adv = compute_turn_advantages(eps, baselines, group_by_task=True)
    assert adv["r1"]["s1"] == pytest.approx(1.0)  # others' mean 0
    assert adv["r2"]["s2"] == pytest.approx(-0.5)
    assert adv["live"]["s4"] == pytest.approx(1.0 - 0.9)  # single run: the cluster baseline
    off = compute_turn_advantages(eps, RunningBaselines(means={"a": 0.9}), group_by_task=False)
    assert off["r1"]["s1"] == pytest.approx(0.1)


def test_episodes_without_outcome_get_no_advantage_and_scaling() -> None:
    eps = [
        Episode("t1", "a", None, None, ["s1"]),
        Episode("t2", "a", None, 2.0, ["s2"]),
        Episode("t3", "a", None, 0.0, ["s3"]),
    ]
    adv = compute_turn_advantages(eps, RunningBaselines(), scale=True)
    assert "t1" not in adv
    # raw: +2 and -2, std 2 -> +1 and -1
    assert adv["t2"]["s2"] == pytest.approx(1.0) and adv["t3"]["s3"] == pytest.approx(-1.0)


def test_token_advantages_follow_turns() -> None:
    assert token_advantages(["a", "b"], [-1, 0, 0, -1, 1], {"a": 0.5, "b": -1.0}) == [0.0, 0.5, 0.5, 0.0, -1.0]
