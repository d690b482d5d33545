"""Engines tuned per backend.

SQLite: WAL (readers never block the writer), synchronous=NORMAL (durable across
process crashes; at most the last commits can be lost on power loss), foreign
keys on, a busy timeout, and `BEGIN IMMEDIATE` for the store's own write
transactions, so concurrent writers queue on the busy timeout instead of failing
on a read-to-write lock upgrade. PostgreSQL: psycopg 3 with pre-ping for
long-lived services. Both serialize JSON with orjson.
"""

from __future__ import annotations

import re
from typing import Any

import orjson
import sqlalchemy as sa
from sqlalchemy.engine import URL, Engine, make_url

from evolvable.errors import StoreError

__all__ = ["WRITE_OPTIONS", "Engine", "RawJSON", "create_engine", "redacted"]
"""`Engine` is re-exported: components name the type from here, and only the store imports SQLAlchemy."""

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
    return sa.create_engine(
        parsed, pool_pre_ping=True, json_serializer=dumps_json, json_deserializer=orjson.loads, pool_size=10
    )


def _sqlite_engine(url: URL) -> sa.Engine:
    database = url.database or ""
    if database and database != ":memory:" and not database.startswith("file:"):
        from pathlib import Path

        Path(database).expanduser().resolve().parent.mkdir(parents=True, exist_ok=True)
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
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        # Purged content must not linger in free pages of the file (right to erasure).
        cur.execute("PRAGMA secure_delete=ON")
        cur.close()

    @sa.event.listens_for(engine, "begin")
    def _on_begin(conn: sa.Connection) -> None:
        write = conn.get_execution_options().get("evolvable_write", False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

    return engine


def redacted(url: str | URL) -> str:
    """The URL with its password hidden, for messages and logs."""
    try:
        return make_url(url).render_as_string(hide_password=True) if isinstance(url, str) else url.render_as_string()
    except sa.exc.ArgumentError:
        return "<invalid url>"
