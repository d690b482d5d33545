"""`iter_trajectories` in keyset batches: every trajectory once, and a consumer that stops early leaves no
connection checked out."""

from __future__ import annotations

from evolvable.protocol.models import events_for
from evolvable.store import Store, TrajectoryFilter


def test_batches_yield_each_trajectory_once(store: Store, make_trajectory) -> None:
    originals = [make_trajectory() for _ in range(23)]
    store.apply_events([e for t in originals for e in events_for(t)])
    seen = [t.id for t in store.iter_trajectories(TrajectoryFilter(), batch_size=5)]
    assert sorted(seen) == sorted(t.id for t in originals) and len(seen) == len(set(seen))


def test_a_consumer_that_stops_early_leaves_no_connection_checked_out(store: Store, make_trajectory) -> None:
    store.apply_events([e for _ in range(12) for e in events_for(make_trajectory())])
    for _ in range(3):
        stream = store.iter_trajectories(TrajectoryFilter(), batch_size=4)
        assert next(stream).steps
        stream.close()
    assert store.engine.pool.checkedout() == 0
    assert store.count(TrajectoryFilter()) == 12
