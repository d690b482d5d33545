"""Gates: significance, not raw means; any new safety failure blocks; outcomes are cached per version."""

from __future__ import annotations

from tests.control.conftest import ScriptedTask, base_harness

from evolvable.control.gates import GateConfig, Gates, ReplaySuite, TaskOutcome


class TableRunner:
    """Outcomes looked up per (system prompt, task id)."""

    def __init__(self, table: dict[str, list[bool]], violations: dict[str, list[bool]] | None = None) -> None:
        self.table, self.violations, self.calls = table, violations or {}, 0

    def run(self, harness, policy, tasks):
        self.calls += 1
        ok = self.table[harness.system_prompt]
        bad = self.violations.get(harness.system_prompt, [False] * len(tasks))
        return [TaskOutcome(t.id, t.cluster, ok[i], violation=bad[i]) for i, t in enumerate(tasks)]


def harness(prompt: str):
    return base_harness().model_copy(update={"system_prompt": prompt})


TASKS = [ScriptedTask(f"t{i}", "refund" if i % 2 else "order_status", "x") for i in range(10)]


def test_a_better_raw_mean_is_not_enough() -> None:
    runner = TableRunner(
        {
            "base": [True, True, False, False, False, False, False, False, True, True],
            "lucky": [True, True, True, True, True, False, False, False, False, True],  # +2 net: 3 wins, 1 loss
            "strong": [True, True, True, True, True, True, True, True, True, True],  # 6 wins, 0 losses
        }
    )
    gates = Gates(GateConfig(alpha=0.05))
    suite = ReplaySuite(runner, TASKS)
    lucky = gates.replay_gate(suite, harness("lucky"), harness("base"))
    assert not lucky.passed and lucky.candidate_rate > lucky.baseline_rate and lucky.p_value > 0.05
    strong = gates.replay_gate(suite, harness("strong"), harness("base"))
    assert strong.passed and strong.p_value < 0.05
    assert strong.per_cluster["refund"] == {"n": 5, "candidate": 5, "baseline": 2}
    assert runner.calls == 3  # the baseline ran once, then came from the cache


def test_any_new_safety_failure_blocks() -> None:
    probes = [ScriptedTask(f"p{i}", "refund_pressure", "x", probe=True) for i in range(4)]
    runner = TableRunner(
        {"base": [True] * 4, "cand": [True] * 4, "same": [True] * 4},
        violations={
            "base": [False, False, True, False],
            "cand": [False, True, True, False],
            "same": [False, False, True, False],
        },
    )
    gates = Gates()
    suite = ReplaySuite(runner, TASKS, probes)
    blocked = gates.safety_gate(suite, harness("cand"), harness("base"))
    assert not blocked.passed and blocked.new_failures == ["p1"]
    kept = gates.safety_gate(suite, harness("same"), harness("base"))  # an old failure is not a regression
    assert kept.passed and kept.candidate_rate == 0.75
    assert Gates().safety_gate(ReplaySuite(runner, TASKS), harness("cand"), harness("base")).passed


def test_prefetch_runs_missing_evaluations_together_and_caches_them() -> None:
    import threading

    class SlowRunner(TableRunner):
        """Each run waits until another run is in flight too (or a timeout): proves they overlap."""

        def __init__(self, table) -> None:
            super().__init__(table)
            self.in_flight, self.overlapped, self.lock = 0, False, threading.Lock()
            self.both = threading.Event()

        def run(self, harness, policy, tasks):
            with self.lock:
                self.in_flight += 1
                if self.in_flight >= 2:
                    self.overlapped = True
                    self.both.set()
            self.both.wait(timeout=5)
            try:
                return super().run(harness, policy, tasks)
            finally:
                with self.lock:
                    self.in_flight -= 1

    runner = SlowRunner({"base": [True] * 10, "cand": [False] * 10})
    gates = Gates()
    suite = ReplaySuite(runner, TASKS, TASKS[:4])
    runs = [("safety", harness("cand"), None), ("safety", harness("base"), None), ("holdout", harness("base"), None)]
    gates.prefetch(suite, runs)
    assert runner.overlapped and runner.calls == 3
    gates.prefetch(suite, runs)  # all cached: nothing runs
    gates.safety_gate(suite, harness("cand"), harness("base"))
    assert runner.calls == 3
    gates.replay_gate(suite, harness("cand"), harness("base"))  # only the candidate's holdout is new
    assert runner.calls == 4
