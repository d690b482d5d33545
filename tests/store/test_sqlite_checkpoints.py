"""SQLite: the WAL is checkpointed on a thread of the store's own after writes, not by the committing writer
(which waited for the checkpoint's writes and fsyncs), and the thread ends with the store."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from evolvable.protocol.models import events_for
from evolvable.store import Store
from evolvable.store.engine import CHECKPOINT_INTERVAL_S, WAL_BACKSTOP_PAGES


def _checkpointers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "evolvable-sqlite-checkpoint"]


def test_writes_are_checkpointed_in_the_background_and_the_thread_ends_with_the_store(
    tmp_path: Path, make_trajectory
) -> None:
    path = tmp_path / "store.db"
    before = len(_checkpointers())
    store = Store.open(f"sqlite:///{path}")
    try:
        with store.engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar() == WAL_BACKSTOP_PAGES
        migrated = path.stat().st_size
        for _ in range(5):
            store.apply_events([e for _ in range(20) for e in events_for(make_trajectory())])
        assert len(_checkpointers()) == before + 1
        # In WAL mode the database file grows only when a checkpoint copies pages into it, and below the
        # backstop no writer checkpoints: the growth is the thread's doing.
        wal = path.with_name(path.name + "-wal").stat().st_size
        assert 0 < wal < WAL_BACKSTOP_PAGES * 4096
        deadline = time.monotonic() + 20 * CHECKPOINT_INTERVAL_S + 5
        while path.stat().st_size < migrated + wal // 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert path.stat().st_size >= migrated + wal // 2
    finally:
        store.close()
    assert len(_checkpointers()) == before
