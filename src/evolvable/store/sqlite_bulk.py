"""SQLite bulk writes straight through the driver's `executemany`.

SQLAlchemy's executemany binds each row through its dict-based parameter machinery, which cost more
CPU than SQLite's own insert for a ~1 kB step row. Here each column's bind processor (the same
conversions SQLAlchemy applies: UTC datetimes to its text format, JSON documents through the
engine's serializer) runs on plain tuples, and the statement goes to `cursor.executemany` once.

Only used inside the store's write transactions, which SQLite runs one at a time (`BEGIN IMMEDIATE`),
so a read followed by a write in the same transaction cannot race another writer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa


def insert_or_ignore(conn: sa.Connection, table: sa.Table, rows: Sequence[Mapping[str, Any]]) -> None:
    """INSERT .. ON CONFLICT DO NOTHING for `rows` (all with the same keys), in order."""
    if not rows:
        return
    columns = list(rows[0])
    placeholders = ", ".join("?" for _ in columns)
    statement = f"INSERT INTO {table.name} ({', '.join(columns)}) VALUES ({placeholders}) ON CONFLICT DO NOTHING"
    conn.exec_driver_sql(statement, bound_rows(conn, table, columns, rows))


def bound_rows(
    conn: sa.Connection, table: sa.Table, columns: Sequence[str], rows: Sequence[Mapping[str, Any]]
) -> list[tuple[Any, ...]]:
    """Rows as driver-ready tuples, converted by each column's bind processor."""
    processors = [table.c[name].type.dialect_impl(conn.dialect).bind_processor(conn.dialect) for name in columns]
    pairs = list(zip(columns, processors, strict=True))
    return [tuple(row[name] if process is None else process(row[name]) for name, process in pairs) for row in rows]


def existing_keys(conn: sa.Connection, column: sa.Column[Any], keys: Sequence[str], chunk: int = 500) -> set[str]:
    """Which of `keys` are already stored in `column` (an indexed, unique column)."""
    found: set[str] = set()
    for start in range(0, len(keys), chunk):
        part = keys[start : start + chunk]
        found.update(conn.scalars(sa.select(column).where(column.in_(part))))
    return found
