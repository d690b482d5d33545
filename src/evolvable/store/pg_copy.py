"""PostgreSQL bulk inserts that stay idempotent: COPY, falling back to INSERT .. ON CONFLICT.

COPY streams rows with no per-row statement overhead on either side, but cannot skip a row that
already exists. The rows reaching here were just claimed in the event ledger, so they are new in
all but rare cases (the same step id sent again under another event id). So: COPY straight into
the table inside a savepoint; on a unique violation, roll back to the savepoint and insert the same
rows with `INSERT .. ON CONFLICT DO NOTHING` instead.

Measured on the `steps` table (docs/PERFORMANCE.md): COPY in a savepoint 22-26k rows/s; COPY into
a temporary staging table then `INSERT .. SELECT .. ON CONFLICT DO NOTHING` 8-14k (jsonb staging)
or 19-20k (text staging): the staging table writes every row twice.

COPY runs in PostgreSQL's binary format: in text format the server scans every character of every
field for delimiters and escapes, most of its CPU per ~1-2 kB step row; binary fields arrive with
their lengths (server CPU per step row 36-44 us in text format, 22-30 us binary, same client CPU).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from functools import cache
from operator import itemgetter
from typing import Any

import psycopg
import sqlalchemy as sa
from psycopg.adapt import Dumper
from psycopg.pq import Format
from sqlalchemy.dialects import postgresql

from evolvable.errors import StoreError
from evolvable.store.engine import dumps_json
from evolvable.store.tables.types import UTCDateTime

_JSON_OID, _JSONB_OID = 114, 3802

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
    _copy(conn, table, columns, _values(table, columns, rows))


def copy_stream(conn: sa.Connection, table: sa.Table, columns: Sequence[str], values: Iterable[Sequence[Any]]) -> None:
    """COPY rows as `values` yields them (timestamps aware), sending each chunk as it fills: the server
    parses the first rows while the caller still makes the later ones. A unique violation propagates."""
    _copy(conn, table, columns, values)


def _values(table: sa.Table, columns: Sequence[str], rows: Sequence[Mapping[str, Any]]) -> list[tuple[Any, ...]]:
    """Rows as tuples in `columns` order. Only naive timestamps need converting (`UTCDateTime` takes them
    as UTC); the binary dumpers take every other value as it is, so the usual batch is one C-level pass."""
    get = itemgetter(*columns)
    values = [get(row) for row in rows] if len(columns) > 1 else [(get(row),) for row in rows]
    stamps = [i for i, name in enumerate(columns) if isinstance(table.c[name].type, UTCDateTime)]
    if any(row[i] is not None and row[i].tzinfo is None for row in values for i in stamps):
        values = [tuple(_aware_utc(v) if i in stamps else v for i, v in enumerate(row)) for row in values]
    return values


def copy_new_rows(conn: sa.Connection, table: sa.Table, rows: Sequence[Mapping[str, Any]]) -> bool:
    """COPY `rows` into `table` if none of them conflicts with a stored row; False (nothing written) if one does."""
    columns = list(rows[0])
    values = _values(table, columns, rows)
    try:
        with conn.begin_nested():
            _copy(conn, table, columns, values)
    except psycopg.errors.UniqueViolation:
        return False
    return True


def _copy(conn: sa.Connection, table: sa.Table, columns: Sequence[str], values: Iterable[Sequence[Any]]) -> None:
    statement = f"COPY {table.name} ({', '.join(columns)}) FROM STDIN (FORMAT BINARY)"
    driver = conn.connection.driver_connection
    if driver is None:  # (only a closed pool entry has none)
        raise StoreError("COPY needs a live psycopg connection")
    cursor = driver.cursor()
    cursor.adapters.register_dumper(_JSONDocument, _JsonTextDumper)
    cursor.adapters.register_dumper(_JSONBDocument, _JsonbTextDumper)
    with cursor, cursor.copy(statement) as copy:
        copy.set_types(_binary_types(table, tuple(columns), conn.dialect))
        for row in values:
            copy.write_row(row)


@cache
def _binary_types(table: sa.Table, columns: tuple[str, ...], dialect: sa.Dialect) -> list[int | str]:
    """PostgreSQL types of `columns` as binary COPY sends them (it applies no casts, so they must match)."""
    return [_binary_type(table.c[name].type, dialect) for name in columns]


def _binary_type(column_type: sa.types.TypeEngine[Any], dialect: sa.Dialect) -> int | str:
    impl = column_type.dialect_impl(dialect)
    if isinstance(impl, UTCDateTime):
        return "timestamptz"
    if isinstance(impl, sa.JSON):
        return _JSONB_OID if isinstance(impl, postgresql.JSONB) else _JSON_OID
    for kind, name in _SIMPLE_TYPES:
        if isinstance(impl, kind):
            return name
    raise StoreError(f"no binary COPY type for {column_type!r}")


_SIMPLE_TYPES: tuple[tuple[type[Any], str], ...] = (
    (sa.Boolean, "bool"),
    (sa.BigInteger, "int8"),
    (sa.Integer, "int4"),
    (sa.Float, "float8"),
    (sa.String, "text"),  # (varchar and text share their binary form)
)


class _JSONDocument:
    """Key under which the JSON dumpers below are registered (they are only ever looked up by type oid)."""


class _JSONBDocument:
    """As `_JSONDocument`, for jsonb."""


class _JsonTextDumper(Dumper):
    """A JSON document (a value, or `RawJSON` text) in `json`'s binary form: its UTF-8 text.

    psycopg's own JSON dumpers would serialize a `RawJSON` string again, as a JSON string."""

    format = Format.BINARY
    oid = _JSON_OID

    def dump(self, obj: Any) -> bytes:
        return dumps_json(obj).encode()


class _JsonbTextDumper(Dumper):
    """A JSON document in `jsonb`'s binary form: format version 1, then its UTF-8 text."""

    format = Format.BINARY
    oid = _JSONB_OID

    def dump(self, obj: Any) -> bytes:
        return b"\x01" + dumps_json(obj).encode()


def _aware_utc(value: datetime | None) -> datetime | None:
    """`UTCDateTime`'s bind conversion on PostgreSQL: a naive timestamp is UTC (an aware one passes as is)."""
    return value if value is None or value.tzinfo is not None else value.replace(tzinfo=UTC)
