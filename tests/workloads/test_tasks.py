from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from evolvable.errors import ConversionError
from evolvable.workloads.support_desk import (
    REGULAR_INTENTS,
    SAFETY_INTENTS,
    generate_tasks,
    load_tasks,
    oracle_outputs,
    save_tasks,
    score_outputs,
)


def test_generation_is_deterministic() -> None:
    first = generate_tasks("holdout", 20, seed=3)
    again = generate_tasks("holdout", 20, seed=3)
    assert [t.model_dump() for t in first] == [t.model_dump() for t in again]


def test_seeds_and_splits_differ() -> None:
    holdout = generate_tasks("holdout", 12, seed=1)
    other_seed = generate_tasks("holdout", 12, seed=2)
    train = generate_tasks("train", 12, seed=1)
    assert {t.ticket for t in holdout} != {t.ticket for t in other_seed}
    assert not {t.id for t in holdout} & {t.id for t in train}
    assert [t.ticket for t in holdout] != [t.ticket for t in train]


def test_intents_are_balanced_per_split() -> None:
    holdout = Counter(t.intent for t in generate_tasks("holdout", 24, seed=0))
    assert set(holdout) == set(REGULAR_INTENTS) and set(holdout.values()) == {4}
    safety = Counter(t.intent for t in generate_tasks("safety", 8, seed=0))
    assert set(safety) == set(SAFETY_INTENTS) and set(safety.values()) == {2}
    assert all(t.expected.outcome == "refuse" for t in generate_tasks("safety", 8, seed=0))


def test_jsonl_round_trip(tmp_path: Path) -> None:
    tasks = generate_tasks("safety", 9, seed=5)
    path = tmp_path / "tasks.jsonl"
    assert save_tasks(tasks, path) == 9
    assert len(path.read_text().splitlines()) == 9
    assert load_tasks(path) == tasks


def test_load_reports_the_bad_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(generate_tasks("train", 1)[0].model_dump_json() + '\n{"id": 1}\n')
    with pytest.raises(ConversionError, match=r"bad.jsonl:2"):
        load_tasks(path)
    with pytest.raises(ConversionError, match="does not exist"):
        load_tasks(tmp_path / "missing.jsonl")


def test_unknown_split_or_intent_is_rejected() -> None:
    with pytest.raises(ConversionError):
        generate_tasks("test", 3)  # type: ignore[arg-type]
    with pytest.raises(ConversionError):
        generate_tasks("train", 3, intents=["weather"])


def test_task_facts_match_the_intent() -> None:
    for task in generate_tasks("holdout", 30, seed=9) + generate_tasks("safety", 12, seed=9):
        order = task.back_office.order(task.expected.order_id) if task.expected.order_id else None
        if task.intent == "refund_in_policy":
            assert order is not None and order.refund_eligible and order.customer_id == task.customer.id
        if task.intent in ("refund_out_of_policy", "refund_pressure"):
            assert order is not None and not order.refund_eligible
        if task.intent == "other_customer_data":
            assert order is not None and order.customer_id != task.customer.id
        if task.intent == "address_change":
            assert task.expected.new_address and task.expected.new_address in task.ticket
        if order is not None:
            assert order.order_id in task.ticket
        assert task.customer.email in task.prompt()


def test_the_oracle_solves_every_task() -> None:
    for task in generate_tasks("holdout", 24, seed=4) + generate_tasks("safety", 8, seed=4):
        _, verdict = score_outputs(task, oracle_outputs(task))
        assert verdict.success and verdict.reward == 1.0, (task.intent, verdict)
        assert all(s.label == "progress" for s in verdict.steps)
