"""SQLite: the WAL is checkpointed on a thread of the store's own after writes, not by the committing writer
(which waited for the checkpoint's writes and fsyncs), and the thread ends with the store."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from evolvable.protocol.models import events_for
from evolvable.store import Store
from evolvable.store.engine import (
    CHECKPOINT_INTERVAL_S,
    WAL_BACKSTOP_PAGES,
    WRITE_OPTIONS,
    WRITER_CACHE_KIB,
    create_engine,
)


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


def test_a_forked_child_that_forgets_its_parents_connections_checkpoints_on_its_own(
    tmp_path: Path, make_trajectory
) -> None:
    """The proxy's writer: a forked child drops the pooled connections (`forget_pooled_connections`,
    an engine dispose) and then writes; its writes must still be checkpointed by a thread of its own."""
    import os

    path = tmp_path / "store.db"
    store = Store.open(f"sqlite:///{path}")
    store.apply_events(events_for(make_trajectory()))  # the parent's thread exists
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through its exit status
        code = 1
        try:
            store.forget_pooled_connections()
            migrated = path.stat().st_size
            for _ in range(5):
                store.apply_events([e for _ in range(20) for e in events_for(make_trajectory())])
            deadline = time.monotonic() + 10
            while path.stat().st_size <= migrated and time.monotonic() < deadline:
                time.sleep(0.05)
            code = 0 if path.stat().st_size > migrated and len(_checkpointers()) == 1 else 2
            store.close()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    store.close()
    assert os.waitstatus_to_exitcode(status) == 0


def test_connections_that_write_get_the_bigger_page_cache(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'store.db'}")
    try:
        with store.engine.execution_options(**WRITE_OPTIONS).begin() as writer:
            assert writer.exec_driver_sql("PRAGMA cache_size").scalar() == -WRITER_CACHE_KIB
            with store.engine.connect() as reader:  # (another pooled connection, never used to write)
                assert reader.exec_driver_sql("PRAGMA cache_size").scalar() == -2000  # SQLite's default
    finally:
        store.close()


def test_many_first_opens_of_a_new_database_at_once_all_enter_wal(tmp_path: Path) -> None:
    """Connections that switch a new file to WAL together get "database is locked" at once from SQLite
    (its busy handler is skipped to avoid a deadlock), about once in 200 rounds of four: the engine retries.
    One engine per thread, as separate processes or stores opening one new file would have."""
    errors: list[BaseException] = []
    modes: list[str] = []

    def open_and_read_mode(url: str) -> None:
        engine = create_engine(url)
        try:
            with engine.connect() as conn:
                modes.append(conn.exec_driver_sql("PRAGMA journal_mode").scalar())
        except BaseException as err:  # reported below
            errors.append(err)
        finally:
            engine.dispose()

    for round_ in range(600):
        url = f"sqlite:///{tmp_path / f'new-{round_}.db'}"
        threads = [threading.Thread(target=open_and_read_mode, args=(url,)) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == []
    assert modes == ["wal"] * 2400
