"""Engines tuned per backend.

SQLite: WAL (readers never block the writer), synchronous=NORMAL (durable across
process crashes; at most the last commits can be lost on power loss), foreign
keys on, a busy timeout, and `BEGIN IMMEDIATE` for the store's own write
transactions, so concurrent writers queue on the busy timeout instead of failing
on a read-to-write lock upgrade. PostgreSQL: psycopg 3 with pre-ping for
long-lived services, JIT off. Both serialize JSON with orjson.
"""

from __future__ import annotations

import logging
import os
import re
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import orjson
import sqlalchemy as sa
from sqlalchemy.engine import URL, Engine, make_url

from evolvable.errors import StoreError

__all__ = ["WRITE_OPTIONS", "Engine", "RawJSON", "create_engine", "redacted"]
"""`Engine` is re-exported: components name the type from here, and only the store imports SQLAlchemy."""

log = logging.getLogger(__name__)

SQLITE_BUSY_TIMEOUT_MS = 30_000
WRITE_OPTIONS = {"evolvable_write": True}
"""Execution options for write transactions (BEGIN IMMEDIATE on SQLite; no effect elsewhere)."""


class RawJSON(str):
    """JSON text that is already serialized (e.g. by pydantic's `model_dump_json`); stored as is."""

    __slots__ = ()


# A JSON-escaped NUL that is not itself an escaped backslash followed by "u0000".
_ESCAPED_NUL = re.compile(r"(?<!\\)((?:\\\\)*)\\u0000")


def dumps_json(value: Any) -> str:
    text = value if isinstance(value, RawJSON) else orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()
    if "\\u0000" in text:
        # PostgreSQL's jsonb rejects NUL characters, and model output or tool results can contain them:
        # store U+FFFD instead, on both backends so they hold the same data.
        text = _ESCAPED_NUL.sub(lambda m: m.group(1) + "\\ufffd", text)
    return text


def normalize_url(url: str) -> URL:
    """Parse a URL; plain `postgresql://` means psycopg 3 (the driver we ship)."""
    try:
        parsed = make_url(url)
    except sa.exc.ArgumentError as err:
        raise StoreError(f"invalid database URL {url!r}: {err}") from None
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.get_backend_name() not in ("sqlite", "postgresql"):
        raise StoreError(f"unsupported database {parsed.get_backend_name()!r}; use sqlite:/// or postgresql+psycopg://")
    return parsed


def create_engine(url: str) -> sa.Engine:
    parsed = normalize_url(url)
    if parsed.get_backend_name() == "sqlite":
        return _sqlite_engine(parsed)
    engine = sa.create_engine(
        parsed, pool_pre_ping=True, json_serializer=dumps_json, json_deserializer=orjson.loads, pool_size=10
    )
    sa.event.listen(engine, "connect", _no_jit)
    return engine


def _no_jit(dbapi_connection: Any, _record: Any) -> None:
    """Turn PostgreSQL's JIT off for the store's sessions: its queries are short keyed look-ups, and right
    after a bulk load (statistics not yet analyzed) their cost estimates pass `jit_above_cost`, so each
    batch of a training read spent ~11 ms compiling expressions it ran for 5 ms (EXPLAIN ANALYZE).
    Servers before 11 have no JIT, and no such setting."""
    if dbapi_connection.info.server_version < 110000:
        return
    with dbapi_connection.cursor() as cursor:
        cursor.execute("SET jit = off")
    dbapi_connection.commit()


def _sqlite_engine(url: URL) -> sa.Engine:
    database = url.database or ""
    checkpointer: _Checkpointer | None = None
    if database and database != ":memory:" and not database.startswith("file:"):
        path = Path(database).expanduser().resolve()
        path.parent.mkdir(parents=True, exist_ok=True)
        checkpointer = _Checkpointer(str(path))
    engine = sa.create_engine(
        url,
        json_serializer=dumps_json,
        json_deserializer=orjson.loads,
        connect_args={"check_same_thread": False, "timeout": SQLITE_BUSY_TIMEOUT_MS / 1000},
    )

    @sa.event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Let SQLAlchemy (not pysqlite) decide when transactions begin; see _on_begin.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        _enter_wal(cur)
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        if checkpointer is not None:  # the checkpointer thread moves the WAL; this bounds it if it falls behind
            cur.execute(f"PRAGMA wal_autocheckpoint={WAL_BACKSTOP_PAGES}")
        # Purged content must not linger in free pages of the file (right to erasure).
        cur.execute("PRAGMA secure_delete=ON")
        cur.close()

    @sa.event.listens_for(engine, "begin")
    def _on_begin(conn: sa.Connection) -> None:
        write = conn.get_execution_options().get("evolvable_write", False)
        if write and not conn.connection.info.get("evolvable_writer"):
            # A bigger page cache for connections that write: a 1,000-event batch dirties more than the
            # default 2 MB, so pages were spilled to the WAL and written again (5-6% of SQLite's ingest CPU).
            # Only writers get it; the pool's read-only connections keep the default.
            conn.exec_driver_sql(f"PRAGMA cache_size=-{WRITER_CACHE_KIB}")
            conn.connection.info["evolvable_writer"] = True
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

    if checkpointer is not None:

        @sa.event.listens_for(engine, "commit")
        def _on_commit(conn: sa.Connection) -> None:
            if conn.get_execution_options().get("evolvable_write", False):
                checkpointer.nudge()

        @sa.event.listens_for(engine, "engine_disposed")
        def _on_dispose(_engine: sa.Engine) -> None:
            checkpointer.close()

    return engine


def _enter_wal(cursor: sqlite3.Cursor) -> None:
    """`PRAGMA journal_mode=WAL`, retried while the file is locked.

    A new database starts in rollback mode, and switching it takes a read lock and then a write lock. When
    two connections switch at once, each holding the read lock, SQLite answers "database is locked" at once
    instead of waiting out the busy timeout (waiting would deadlock: see sqlite3_busy_handler). Concurrent
    first opens of one file (several services, or threads, opening a new store) hit it about once in 200.
    """
    deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_MS / 1000
    pause = 0.001
    while True:
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as err:
            if "locked" not in str(err) or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


WRITER_CACHE_KIB = 16_384
WAL_BACKSTOP_PAGES = 16_000
"""Writers checkpoint themselves only once the WAL holds this many pages (64 MB at 4 kB pages; SQLite's
default is 1,000): normally the checkpointer thread has done it already."""
CHECKPOINT_INTERVAL_S = 0.25


class _Checkpointer:
    """Copies SQLite's write-ahead log into the database file on a thread of its own, after writes.

    By default the connection that commits runs the checkpoint when the WAL passes 1,000 pages: it
    writes the pages into the database file and waits for two fsyncs, and the writer waits with it
    (16,000 steps ingested: 8.1k steps/s with that, 13.2k with no checkpoints at all, at the same CPU).
    A PASSIVE checkpoint on another connection blocks no reader or writer, and sqlite3 releases the
    GIL while it runs, so the writer keeps going. Durability is unchanged: commits are as durable as
    before (WAL with synchronous=NORMAL), the checkpoint only moves committed pages. At most one
    checkpoint per `CHECKPOINT_INTERVAL_S`; the writers' `wal_autocheckpoint` bounds the WAL should
    this thread fall behind. After a fork the child starts its own thread on its first write."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pid = 0
        self._home = os.getpid()

    def nudge(self) -> None:
        if self._stop.is_set():
            return
        if self._thread is None or self._pid != os.getpid():
            with self._lock:
                if self._thread is None or self._pid != os.getpid():
                    self._wake, self._pid = threading.Event(), os.getpid()
                    self._thread = threading.Thread(
                        target=self._run, args=(self._wake,), name="evolvable-sqlite-checkpoint", daemon=True
                    )
                    self._thread.start()
        self._wake.set()

    def close(self) -> None:
        """Stop for good, unless this is a forked child disposing of its parent's connections (the proxy's
        writer does, then writes): the parent's thread is not ours, so the child's next write starts one."""
        if os.getpid() != self._home:
            self._home, self._thread, self._pid = os.getpid(), None, 0
            return
        self._stop.set()
        self._wake.set()
        thread = self._thread
        if thread is not None and self._pid == os.getpid() and thread is not threading.current_thread():
            thread.join(timeout=10)

    def _run(self, wake: threading.Event) -> None:
        conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
        try:
            conn.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
            while True:
                wake.wait()
                # (nudged as a write commits: a moment later its pages are in the WAL, and later commits wait
                # for the next round, so there is at most one checkpoint per interval)
                if self._stop.wait(CHECKPOINT_INTERVAL_S):
                    return
                wake.clear()
                try:
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
                except sqlite3.Error as err:  # (the writers' own checkpoints still run)
                    log.warning("background WAL checkpoint of %s failed: %s", self._path, err)
        finally:
            conn.close()


def redacted(url: str | URL) -> str:
    """The URL with its password hidden, for messages and logs."""
    try:
        return make_url(url).render_as_string(hide_password=True) if isinstance(url, str) else url.render_as_string()
    except sa.exc.ArgumentError:
        return "<invalid url>"
