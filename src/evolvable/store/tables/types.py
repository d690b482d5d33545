"""Column types shared by every component's tables.

`UTCDateTime` keeps timestamps timezone-aware on both backends: PostgreSQL stores
`timestamptz`; SQLite has no time zones, so values are stored as naive UTC and
come back tagged UTC (lexical order = time order, so range filters stay correct).
`JSONDocument` is JSONB on PostgreSQL (indexable, compact) and JSON text elsewhere.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Dialect


class UTCDateTime(sa.types.TypeDecorator[datetime]):
    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        value = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        # (a string: raw SQL results on SQLite)
        stamp: datetime = datetime.fromisoformat(value) if isinstance(value, str) else value
        return stamp.replace(tzinfo=UTC) if stamp.tzinfo is None else stamp.astimezone(UTC)


JSONDocument = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
"""JSON column type: JSONB on PostgreSQL, JSON (text) on SQLite."""

JSONText = sa.JSON()
"""A JSON document kept as text on both backends (PostgreSQL's `json`: syntax-checked, stored as sent).

For step and signal bodies, which are written in bulk and read back whole, never queried inside:
jsonb's parse on every insert and re-serialization on every read halved the ingest rate (COPY into
`steps`: 24-27k rows/s as jsonb, 36-53k as json) and cost the training read most of its server CPU."""

AutoIncrementBigInt = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
"""A 64-bit surrogate key that still autoincrements on SQLite (only INTEGER PRIMARY KEY aliases rowid)."""
