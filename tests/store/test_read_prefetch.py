"""`iter_trajectories` fetches the next keyset batch ahead (PostgreSQL): every trajectory once, in order,
and a consumer that stops early leaves nothing behind (no thread, no checked-out connection)."""

from __future__ import annotations

import threading
import time

from evolvable.protocol.models import events_for
from evolvable.store import Store, TrajectoryFilter


def _readers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("evolvable-read")]


def test_batches_fetched_ahead_yield_each_trajectory_once_in_order(store: Store, make_trajectory) -> None:
    originals = [make_trajectory() for _ in range(23)]
    store.apply_events([e for t in originals for e in events_for(t)])
    seen = [t.id for t in store.iter_trajectories(TrajectoryFilter(), batch_size=5)]
    assert sorted(seen) == sorted(t.id for t in originals) and len(seen) == len(set(seen))


def test_a_consumer_that_stops_early_leaves_no_reader_behind(store: Store, make_trajectory) -> None:
    store.apply_events([e for _ in range(12) for e in events_for(make_trajectory())])
    before = len(_readers())
    for _ in range(3):
        stream = store.iter_trajectories(TrajectoryFilter(), batch_size=4)
        assert next(stream).steps
        stream.close()
    deadline = time.monotonic() + 10
    while len(_readers()) > before and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(_readers()) == before
    assert store.engine.pool.checkedout() == 0
    assert store.count(TrajectoryFilter()) == 12
