"""What every SQL repository shares: write transactions and UTC times back from SQLite."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import overload

import sqlalchemy as sa

from evolvable.store.engine import WRITE_OPTIONS


@contextmanager
def write_transaction(engine: sa.Engine) -> Iterator[sa.Connection]:
    """A write transaction; on SQLite it takes the write lock up front (BEGIN IMMEDIATE), so
    concurrent writers queue on the busy timeout instead of failing on a lock upgrade."""
    with engine.connect() as conn:
        conn = conn.execution_options(**WRITE_OPTIONS)
        with conn.begin():
            yield conn


@overload
def utc(value: datetime) -> datetime: ...


@overload
def utc(value: None) -> None: ...


def utc(value: datetime | None) -> datetime | None:
    """SQLite hands back naive datetimes; everything we store is UTC."""
    if value is None:
        return None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def now() -> datetime:
    return datetime.now(UTC)
