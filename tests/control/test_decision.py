"""Lever decision rules on synthetic statistics: smallest blast radius the evidence supports."""

from __future__ import annotations

from datetime import UTC, datetime

from tests.control.conftest import base_harness

from evolvable.control.decision import DecisionConfig, DecisionContext, decide
from evolvable.control.models import Decision, DecisionState, Lever, Verdict
from evolvable.control.statistics import AgentStatistics, GroupStats

CFG = DecisionConfig(
    min_runs=10, min_cluster_runs=3, recurring_label_min=3, argument_error_min=3, weights_min_runs=50, harness_stall=2
)


def group(n: int, successes: int, labels: dict[str, int] | None = None, tool_errors=None, violations=0) -> GroupStats:
    return GroupStats(
        n=n,
        successes=successes,
        success_rate=successes / n if n else 0.0,
        success_ci=(0.0, 1.0),
        reward_mean=None,
        reward_ci=None,
        reward_variance=0.2,
        trend_per_100=0.0,
        failure_labels=labels or {},
        tool_errors=tool_errors or {},
        violations=violations,
    )


def stats(
    clusters: dict[str, GroupStats], *, successful=None, arg_errors=None, versions=None, since_runs=0, variance=0.0
) -> AgentStatistics:
    total = sum(g.n for g in clusters.values())
    return AgentStatistics(
        agent="desk",
        window=total,
        overall=group(
            total, sum(g.successes for g in clusters.values()), _merge([g.failure_labels for g in clusters.values()])
        ),
        clusters=clusters,
        by_harness_version=versions or {},
        argument_errors=arg_errors or {},
        cluster_drift=0.0,
        since_weight_update={"runs": since_runs, "reward_variance": variance, "since": None},
        successful_runs=successful or {c: g.successes for c, g in clusters.items()},
    )


def _merge(dicts):
    out: dict[str, int] = {}
    for d in dicts:
        for k, v in d.items():
            out[k] = out.get(k, 0) + v
    return out


def ctx(s: AgentStatistics, recent=(), parent=None) -> DecisionContext:
    return DecisionContext(
        stats=s, active_harness=base_harness(), active_version="h1-active", parent_version=parent, recent=list(recent)
    )


def past(lever: Lever, state: DecisionState, target_key: str, verdict=None) -> Decision:
    now = datetime.now(UTC)
    return Decision(
        id="dec_x",
        agent="desk",
        lever=lever,
        state=state,
        evidence={"target_key": target_key},
        verdict=verdict,
        created_at=now,
        updated_at=now,
    )


def test_too_little_data_means_no_decision() -> None:
    proposal, trace = decide(ctx(stats({"refund": group(4, 0)})), CFG)
    assert proposal is None and "only 4 finished runs" in trace[0]


def test_failing_cluster_with_successful_exemplars_picks_memory() -> None:
    s = stats({"refund": group(10, 2, {"wrong_tool": 8}), "order_status": group(10, 10)})
    proposal, _ = decide(ctx(s), CFG)
    assert proposal.lever == Lever.memory and proposal.improve == ["refund"]
    assert proposal.evidence["trace"][-1].startswith("memory: fired (expected effect +")


def test_recurring_argument_error_on_one_tool_picks_tool() -> None:
    s = stats(
        {"refund": group(10, 0, {"bad_arguments": 6}, {"lookup_order:InvalidArguments": 6})},
        arg_errors={"lookup_order": {"missing argument order_id": 6}},
    )
    proposal, _ = decide(ctx(s), CFG)
    assert proposal.lever == Lever.tool and proposal.target["tool"] == "lookup_order"
    assert proposal.improve == ["refund"]


def test_without_exemplars_recurring_labels_pick_a_scoped_skill() -> None:
    s = stats({"refund": group(10, 0, {"wrong_tool": 6}), "order_status": group(10, 10)})
    proposal, _ = decide(ctx(s), CFG)
    assert proposal.lever == Lever.skill and proposal.target["clusters"] == ["refund"]


def test_disabled_or_cooling_levers_fall_through_to_the_next_rule() -> None:
    s = stats({"refund": group(10, 2, {"wrong_tool": 8}), "order_status": group(10, 10)})
    only_skill = DecisionConfig(**{**CFG.__dict__, "levers": frozenset({Lever.skill})})
    assert decide(ctx(s), only_skill)[0].lever == Lever.skill
    failed_memory = past(Lever.memory, DecisionState.gated_out, "memory:['refund']:")
    assert decide(ctx(s, recent=[failed_memory]), CFG)[0].lever == Lever.skill


def test_broad_failures_pick_the_prompt() -> None:
    s = stats({c: group(6, 0, {"format_error": 5}) for c in ("a", "b", "c")})
    proposal, _ = decide(ctx(s), DecisionConfig(**{**CFG.__dict__, "levers": frozenset({Lever.prompt})}))
    assert proposal.lever == Lever.prompt and sorted(proposal.improve) == ["a", "b", "c"]


def test_weights_when_harness_edits_stopped_paying_off() -> None:
    s = stats(
        {"a": group(30, 10, {"wrong_tool": 20}), "b": group(30, 10)},
        successful={"a": 0, "b": 0},
        since_runs=60,
        variance=0.2,
    )
    stalled = [
        past(Lever.skill, DecisionState.gated_out, "x"),
        past(Lever.prompt, DecisionState.promoted, "y", Verdict.ineffective),
    ]
    cfg = DecisionConfig(**{**CFG.__dict__, "levers": frozenset({Lever.weights, Lever.skill, Lever.prompt})})
    # Skill and prompt would fire first (smaller blast radius); both just failed, so weights.
    stalled.insert(0, past(Lever.skill, DecisionState.gated_out, "skill:['a']:"))
    stalled.insert(0, past(Lever.prompt, DecisionState.gated_out, "prompt:[]:"))
    proposal, _ = decide(ctx(s, recent=stalled), cfg)
    assert proposal is not None and proposal.lever == Lever.weights, proposal
    only_weights = DecisionConfig(**{**CFG.__dict__, "levers": frozenset({Lever.weights})})
    assert decide(ctx(s, recent=stalled), only_weights)[0].lever == Lever.weights
    assert decide(ctx(s, recent=[]), cfg)[0].lever != Lever.weights  # not stalled: a harness lever first
    low_variance = stats({"a": group(30, 10, {"wrong_tool": 20})}, successful={"a": 0}, since_runs=60, variance=0.0)
    assert decide(ctx(low_variance, recent=stalled), only_weights)[0] is None


def test_a_regression_rolls_back_before_anything_else() -> None:
    s = stats(
        {"refund": group(20, 4, {"wrong_tool": 16})}, versions={"h1-active": group(20, 4), "h1-parent": group(20, 16)}
    )
    proposal, _ = decide(ctx(s, parent="h1-parent"), CFG)
    assert proposal.lever == Lever.rollback and proposal.target == {"restore": "h1-parent"}
    assert proposal.evidence["p_value"] < 0.05


def _run(cluster: str, success: bool, tool_calls: int, i: int):
    from evolvable.control.statistics import RunSummary

    return RunSummary(
        trajectory_id=f"t{cluster}{i}",
        agent="desk",
        cluster=cluster,
        task_text="ticket",
        task_id=None,
        harness_version="h",
        policy_version=None,
        started_at=datetime(2026, 11, 1, tzinfo=UTC),
        success=success,
        reward=1.0 if success else 0.0,
        tool_calls=tool_calls,
    )


def test_memory_borrows_format_exemplars_when_failing_clusters_have_no_success() -> None:
    s = stats({"refund": group(5, 5), "orders": group(5, 0), "address": group(5, 0)})
    runs = [_run("refund", True, 1, 0), _run("refund", True, 0, 1), _run("orders", False, 1, 2)]
    ctx = DecisionContext(stats=s, active_harness=base_harness(), active_version="h", parent_version=None, runs=runs)
    proposal, _ = decide(ctx, CFG)
    assert proposal is not None and proposal.lever == Lever.memory
    assert proposal.target == {"clusters": ["address", "orders"], "donors": ["refund"]}
    assert proposal.at_risk == ["refund"]


def test_no_format_exemplars_without_a_successful_tool_using_run() -> None:
    s = stats({"refund": group(5, 5), "orders": group(5, 0)}, successful={"refund": 5, "orders": 0})
    runs = [_run("refund", True, 0, 0), _run("orders", False, 1, 1)]
    ctx = DecisionContext(stats=s, active_harness=base_harness(), active_version="h", parent_version=None, runs=runs)
    proposal, _ = decide(ctx, CFG)
    assert proposal is None or proposal.lever != Lever.memory


def test_without_successes_an_explorable_agent_explores_its_recorded_failed_tasks() -> None:
    s = stats({"refund": group(5, 5), "orders": group(5, 0), "address": group(5, 0)})
    runs = [_run("refund", True, 1, 0), _run("orders", False, 1, 1), _run("address", False, 0, 2)]
    runs[1].task_id = "sd-train-1-0001"  # only the orders run can be replayed
    explorable = DecisionContext(
        stats=s, active_harness=base_harness(), active_version="h", parent_version=None, runs=runs, can_explore=True
    )
    proposal, _ = decide(explorable, CFG)
    assert proposal is not None and proposal.lever == Lever.memory
    assert proposal.rule == "explore failing clusters by replay"
    assert proposal.target == {"clusters": ["orders"], "explore": True} and proposal.improve == ["orders"]
    assert proposal.target_key.endswith(":explore")
    # A runner that cannot explore falls back to borrowing format exemplars.
    explorable.can_explore = False
    fallback, _ = decide(explorable, CFG)
    assert fallback is not None and "donors" in fallback.target
    # A failed exploration of the same clusters cools down; the next rule gets its turn.
    explorable.can_explore = True
    explorable.recent = [past(Lever.memory, DecisionState.unavailable, proposal.target_key)]
    cooled, trace = decide(explorable, CFG)
    assert cooled is None or cooled.target != proposal.target
    assert any("cooldown" in line for line in trace)
