"""The weights lever's snapshot gate: publish the best snapshot only if it beats the served policy
without any cluster collapsing."""

from __future__ import annotations

from evolvable.control.gates import TaskOutcome
from evolvable.control.snapshot_gate import SnapshotGateConfig, choose_snapshot, gate_snapshots, gate_steps


def outcomes(solved: dict[str, int], per_cluster: int = 4) -> list[TaskOutcome]:
    rows = []
    for cluster, n in solved.items():
        rows += [TaskOutcome(f"{cluster}-{i}", cluster, success=i < n) for i in range(per_cluster)]
    return rows


def test_gate_steps_are_evenly_spaced_and_existing() -> None:
    assert gate_steps({5, 10, 15}, 15, 3) == [5, 10, 15]
    assert gate_steps({2, 4, 6, 8, 10, 12, 14, 15}, 15, 3) == [10, 15]  # step 5 was never saved
    assert gate_steps({1}, 1, 3) == [1]


def test_best_passing_snapshot_wins_earliest_on_tie() -> None:
    base = outcomes({"a": 2, "b": 2})
    verdict = choose_snapshot(
        base, {5: outcomes({"a": 3, "b": 2}), 10: outcomes({"a": 4, "b": 2}), 15: outcomes({"a": 4, "b": 2})}
    )
    assert verdict.chosen_step == 10 and verdict.base_solved == 4
    assert verdict.candidates[5]["passed"] and "step 10 solved 6/8" in verdict.reason


def test_a_collapsing_cluster_fails_even_with_more_successes() -> None:
    base = outcomes({"a": 1, "b": 3})
    verdict = choose_snapshot(base, {4: outcomes({"a": 4, "b": 1})})  # +3 in a, -2 in b
    assert verdict.chosen_step is None and not verdict.candidates[4]["passed"]
    assert (
        choose_snapshot(base, {4: outcomes({"a": 4, "b": 1})}, SnapshotGateConfig(max_cluster_loss=2)).chosen_step == 4
    )


def test_equal_is_not_better_and_nothing_is_published() -> None:
    base = outcomes({"a": 2})
    verdict = choose_snapshot(base, {3: outcomes({"a": 2})})
    assert verdict.chosen_step is None and "no snapshot beat the served policy (2/4" in verdict.reason
    assert verdict.to_dict()["candidates"]["3"]["solved"] == 2


def test_gate_snapshots_evaluates_served_then_each_chosen_step() -> None:
    seen: list[str | None] = []
    scores = {None: {"a": 1}, "s3": {"a": 2}, "s6": {"a": 4}}

    def evaluate(adapter: str | None) -> list[TaskOutcome]:
        seen.append(adapter)
        return outcomes(scores[adapter])

    verdict = gate_snapshots(evaluate, {3: "s3", 6: "s6"}, 6, SnapshotGateConfig(points=2))
    assert seen == [None, "s3", "s6"] and verdict.chosen_step == 6
