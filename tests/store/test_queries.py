"""Filters, keyset pagination, streaming iteration, counting and purging."""

from __future__ import annotations

import tracemalloc
from datetime import UTC, datetime, timedelta

import pytest

from evolvable.errors import StoreError
from evolvable.protocol.models import (
    MessageStep,
    Signal,
    Trajectory,
    TrajectoryStatus,
    events_for,
)
from evolvable.store import InvalidCursor, Store, TrajectoryFilter, events_of

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


def _small(i: int, **fields: object) -> Trajectory:
    """A short trajectory (one step, one signal on it) whose start time is T0 + i minutes."""
    step = MessageStep(content=f"ticket {i}")
    return Trajectory(
        started_at=T0 + timedelta(minutes=i),
        steps=[step],
        signals=[Signal(kind="process", value=0.5, step_id=step.id)],
        **fields,  # type: ignore[arg-type]
    )


@pytest.fixture
def population(store: Store, make_trajectory) -> dict[str, Trajectory]:
    """Trajectories that differ in exactly one field from `base`, keyed by what sets them apart."""
    common = {"harness_version": "h1", "policy_version": "p1", "end_user": "alice", "task_id": "task-1"}
    made = {
        "base": make_trajectory(started_at=T0, **common),
        "tenant": make_trajectory(started_at=T0 + timedelta(hours=1), tenant_id="acme", **common),
        "agent": make_trajectory(started_at=T0 + timedelta(hours=2), agent="billing", **common),
        "status": make_trajectory(
            started_at=T0 + timedelta(hours=3), status=TrajectoryStatus.failed, outcome=0.0, **common
        ),
        "harness": make_trajectory(started_at=T0 + timedelta(hours=4), **{**common, "harness_version": "h2"}),
        "policy": make_trajectory(started_at=T0 + timedelta(hours=5), **{**common, "policy_version": "p2"}),
        "user": make_trajectory(started_at=T0 + timedelta(hours=6), **{**common, "end_user": "bob"}),
        "task": make_trajectory(started_at=T0 + timedelta(hours=7), **{**common, "task_id": "task-2"}),
        "no_outcome": make_trajectory(started_at=T0 + timedelta(hours=8), outcome=None, **common),
    }
    store.apply_events(events_of(list(made.values())))
    return made


def _ids(store: Store, f: TrajectoryFilter) -> set[str]:
    page, cursor = store.list_trajectories(f, limit=100)
    assert cursor is None
    assert store.count(f) == len(page)
    assert {t.id for t in store.iter_trajectories(f)} == {h.id for h in page}
    return {h.id for h in page}


FILTER_CASES = [
    ({"tenant_id": "acme"}, {"tenant"}),
    ({"agent": "billing"}, {"agent"}),
    ({"status": "failed"}, {"status"}),
    ({"status": TrajectoryStatus.failed}, {"status"}),
    ({"harness_version": "h2"}, {"harness"}),
    ({"policy_version": "p2"}, {"policy"}),
    ({"end_user": "bob"}, {"user"}),
    ({"task_id": "task-2"}, {"task"}),
    ({"agent": ["billing", "nobody"]}, {"agent"}),
    (
        {"harness_version": ("h1",), "tenant_id": "default", "end_user": "alice"},
        {"base", "agent", "status", "policy", "task", "no_outcome"},
    ),
    ({"has_outcome": False}, {"no_outcome"}),
    ({"started_after": T0 + timedelta(hours=7)}, {"task", "no_outcome"}),
    ({"started_before": T0 + timedelta(hours=1)}, {"base"}),
    ({"started_after": T0 + timedelta(hours=2), "started_before": T0 + timedelta(hours=4)}, {"agent", "status"}),
    ({"started_after": (T0 + timedelta(hours=7)).replace(tzinfo=None)}, {"task", "no_outcome"}),
]


def test_each_filter_field_selects_exactly_its_trajectories(store: Store, population: dict[str, Trajectory]) -> None:
    # One population per backend, every criterion checked against it (a fresh database per case is slow).
    for criteria, expected in FILTER_CASES:
        got = _ids(store, TrajectoryFilter(**criteria))
        assert got == {population[k].id for k in expected}, criteria


def test_ids_and_has_outcome_filters(store: Store, population: dict[str, Trajectory]) -> None:
    wanted = [population["base"].id, population["no_outcome"].id, "traj_missing"]
    assert _ids(store, TrajectoryFilter(ids=wanted)) == set(wanted[:2])
    assert _ids(store, TrajectoryFilter(ids=[])) == set()
    with_outcome = _ids(store, TrajectoryFilter(has_outcome=True))
    assert with_outcome == {t.id for k, t in population.items() if k != "no_outcome"}


def test_step_level_outcome_does_not_count_as_a_trajectory_outcome(store: Store) -> None:
    t = _small(0)
    t = t.model_copy(update={"signals": [Signal(kind="outcome", value=1.0, step_id=t.steps[0].id)]})
    store.put_trajectory(t)
    assert store.count(TrajectoryFilter(has_outcome=True)) == 0


def test_pages_cover_everything_once_newest_first(store: Store) -> None:
    batch = [_small(i // 3) for i in range(95)]  # three trajectories share each start time: ties break by id
    store.apply_events(events_of(batch))
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        page, cursor = store.list_trajectories(TrajectoryFilter(), limit=10, cursor=cursor)
        seen += [h.id for h in page]
        pages += 1
        if cursor is None:
            break
    assert pages == 10
    assert len(seen) == len(set(seen)) == 95
    expected = sorted(batch, key=lambda t: (t.started_at, t.id), reverse=True)
    assert seen == [t.id for t in expected]


def test_pagination_is_stable_while_new_trajectories_arrive(store: Store) -> None:
    store.apply_events(events_of([_small(i) for i in range(20)]))
    first, cursor = store.list_trajectories(TrajectoryFilter(), limit=10)
    store.apply_events(events_of([_small(100 + i) for i in range(5)]))  # newer than anything listed
    second, cursor = store.list_trajectories(TrajectoryFilter(), limit=10, cursor=cursor)
    assert cursor is None
    assert not {h.id for h in first} & {h.id for h in second}
    assert len(first) + len(second) == 20


def test_invalid_cursor_and_limits(store: Store) -> None:
    with pytest.raises(InvalidCursor):
        store.list_trajectories(TrajectoryFilter(), cursor="not-a-cursor")
    with pytest.raises(InvalidCursor):
        store.list_trajectories(TrajectoryFilter(), cursor="WzEsMl0")  # valid base64 JSON, wrong shape
    with pytest.raises(StoreError):
        store.list_trajectories(TrajectoryFilter(), limit=0)
    with pytest.raises(StoreError):
        list(store.iter_trajectories(TrajectoryFilter(), batch_size=0))


def test_streaming_thousands_with_bounded_memory(store: Store) -> None:
    n = 2000
    batch = [_small(i, agent="bulk") for i in range(n)]
    for start in range(0, n, 1000):
        store.apply_events(events_of(batch[start : start + 1000]))
    tracemalloc.start()
    count, previous, peak_at_first_batch = 0, None, 0
    for t in store.iter_trajectories(TrajectoryFilter(agent="bulk"), batch_size=100):
        assert len(t.steps) == 1 and len(t.signals) == 1
        key = (t.started_at, t.id)
        assert previous is None or key > previous  # oldest first, no duplicates
        previous = key
        count += 1
        if count == 100:
            peak_at_first_batch = tracemalloc.get_traced_memory()[1]
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert count == n
    # Memory does not grow with the result set: the peak after 20 batches stays near the first batch's.
    assert peak < 3 * peak_at_first_batch


def test_delete_by_filter_removes_steps_and_signals(store: Store, population: dict[str, Trajectory]) -> None:
    import sqlalchemy as sa

    from evolvable.store.tables.trajectories import signals, steps

    victim = population["user"]
    assert store.delete_trajectories(TrajectoryFilter(end_user="bob")) == 1
    assert store.count(TrajectoryFilter()) == len(population) - 1
    with store.engine.connect() as conn:
        for table in (steps, signals):
            assert conn.scalar(sa.select(sa.func.count()).where(table.c.trajectory_id == victim.id)) == 0
        assert conn.scalar(sa.select(sa.func.count()).select_from(steps)) == (len(population) - 1) * 7
    assert store.get_trajectory(population["base"].id) == population["base"]
    assert store.delete_trajectories(TrajectoryFilter(end_user="bob")) == 0


def test_delete_in_several_batches_and_by_tenant(store: Store) -> None:
    store.apply_events(events_of([_small(i, tenant_id="gone") for i in range(25)] + [_small(99, tenant_id="kept")]))
    assert store.delete_trajectories(TrajectoryFilter(tenant_id="gone"), batch_size=7) == 25
    assert store.count(TrajectoryFilter()) == 1


def test_delete_needs_a_filter(store: Store) -> None:
    store.put_trajectory(_small(0))
    with pytest.raises(StoreError, match="empty filter"):
        store.delete_trajectories(TrajectoryFilter())
    assert store.count(TrajectoryFilter()) == 1


def test_retention_style_delete_by_time(store: Store) -> None:
    store.apply_events(events_of([_small(i) for i in range(10)]))
    assert store.delete_trajectories(TrajectoryFilter(started_before=T0 + timedelta(minutes=4))) == 4
    remaining = [t.started_at for t in store.iter_trajectories(TrajectoryFilter())]
    assert min(remaining) == T0 + timedelta(minutes=4)


def test_list_and_count_are_tenant_scoped(store: Store) -> None:
    for tenant in ("a", "b", "c"):
        store.apply_events([e for i in range(3) for e in events_for(_small(i, tenant_id=tenant))])
    page, _ = store.list_trajectories(TrajectoryFilter(tenant_id="b"))
    assert {h.tenant_id for h in page} == {"b"} and len(page) == 3
    assert store.count(TrajectoryFilter(tenant_id=["a", "c"])) == 6
