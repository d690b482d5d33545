"""PostgreSQL bulk inserts that stay idempotent: COPY, falling back to INSERT .. ON CONFLICT.

COPY streams rows with no per-row statement overhead on either side, but cannot skip a row that
already exists. The rows reaching here were just claimed in the event ledger, so they are new in
all but rare cases (the same step id sent again under another event id). So: COPY straight into
the table inside a savepoint; on a unique violation, roll back to the savepoint and insert the same
rows with `INSERT .. ON CONFLICT DO NOTHING` instead.

Measured on the `steps` table (docs/PERFORMANCE.md): COPY in a savepoint 22-26k rows/s; COPY into
a temporary staging table then `INSERT .. SELECT .. ON CONFLICT DO NOTHING` 8-14k (jsonb staging)
or 19-20k (text staging): the staging table writes every row twice.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import psycopg
import sqlalchemy as sa

from evolvable.errors import StoreError
from evolvable.store.engine import dumps_json
from evolvable.store.tables.types import UTCDateTime

_UTC = UTCDateTime()

CONFLICTS = (sa.exc.IntegrityError, psycopg.errors.IntegrityError)
"""What a conflicting optimistic COPY raises: psycopg's own error through the raw cursor COPY uses,
SQLAlchemy's where a statement ran through it."""


def copy_insert(
    conn: sa.Connection, table: sa.Table, rows: Sequence[Mapping[str, Any]], fallback: Any, *, optimistic: bool = False
) -> None:
    """Insert `rows` (all with the same keys) into `table`, skipping rows that are already stored.

    `fallback` is the dialect's `INSERT .. ON CONFLICT DO NOTHING` for `table`, used when COPY hits a conflict.
    `optimistic`: COPY without a savepoint; a conflict then fails the whole transaction (the caller retries
    the batch without it, see `ingest.apply`): two round trips fewer per table and batch.
    """
    if not rows:
        return
    if optimistic:
        copy_rows(conn, table, rows)
    elif not copy_new_rows(conn, table, rows):
        conn.execute(fallback, rows)


def copy_rows(conn: sa.Connection, table: sa.Table, rows: Sequence[Mapping[str, Any]]) -> None:
    """COPY `rows` into `table`; a unique violation propagates (and aborts the transaction)."""
    columns = list(rows[0])
    _copy(conn, table.name, columns, _values(conn, table, columns, rows))


def _values(
    conn: sa.Connection, table: sa.Table, columns: Sequence[str], rows: Sequence[Mapping[str, Any]]
) -> list[list[Any]]:
    converters = [_converter(table.c[name], conn.dialect) for name in columns]
    return [[convert(row[name]) for name, convert in zip(columns, converters, strict=True)] for row in rows]


def copy_new_rows(conn: sa.Connection, table: sa.Table, rows: Sequence[Mapping[str, Any]]) -> bool:
    """COPY `rows` into `table` if none of them conflicts with a stored row; False (nothing written) if one does."""
    columns = list(rows[0])
    values = _values(conn, table, columns, rows)
    try:
        with conn.begin_nested():
            _copy(conn, table.name, columns, values)
    except psycopg.errors.UniqueViolation:
        return False
    return True


def _copy(conn: sa.Connection, table_name: str, columns: Sequence[str], values: Sequence[Sequence[Any]]) -> None:
    statement = f"COPY {table_name} ({', '.join(columns)}) FROM STDIN"
    driver = conn.connection.driver_connection
    if driver is None:  # (only a closed pool entry has none)
        raise StoreError("COPY needs a live psycopg connection")
    cursor = driver.cursor()
    with cursor, cursor.copy(statement) as copy:
        for row in values:
            copy.write_row(row)


def _converter(column: sa.Column[Any], dialect: sa.Dialect) -> Callable[[Any], Any]:
    """What SQLAlchemy's bind processing does for this column, for COPY (which bypasses it)."""
    if isinstance(column.type, UTCDateTime):
        return lambda value: _UTC.process_bind_param(value, dialect)
    if isinstance(column.type, sa.JSON):
        return lambda value: None if value is None else dumps_json(value)
    return _identity


def _identity(value: Any) -> Any:
    return value
