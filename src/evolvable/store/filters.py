"""Which trajectories a query means, and opaque keyset cursors for paging through them."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass, fields
from datetime import UTC, datetime

import orjson
import sqlalchemy as sa

from evolvable.errors import StoreError
from evolvable.store.tables.trajectories import signals, trajectories

Values = str | Sequence[str] | None
"""One value, or any of several values."""


class InvalidCursor(StoreError):
    """A pagination cursor that this store did not issue (or that was altered)."""


@dataclass(frozen=True, kw_only=True)
class TrajectoryFilter:
    """All given criteria must hold. A field left None does not constrain; a list means "any of"."""

    tenant_id: Values = None
    agent: Values = None
    status: Values = None
    harness_version: Values = None
    policy_version: Values = None
    end_user: Values = None
    task_id: Values = None
    started_after: datetime | None = None
    """Inclusive lower bound on started_at."""
    started_before: datetime | None = None
    """Exclusive upper bound on started_at."""
    ids: Sequence[str] | None = None
    has_outcome: bool | None = None
    """True: only trajectories with a trajectory-level outcome signal; False: only those without."""

    def is_empty(self) -> bool:
        return all(getattr(self, f.name) is None for f in fields(self))

    def where(self) -> list[sa.ColumnElement[bool]]:
        clauses: list[sa.ColumnElement[bool]] = []
        for name in ("tenant_id", "agent", "status", "harness_version", "policy_version", "end_user", "task_id"):
            value = getattr(self, name)
            if value is None:
                continue
            column = trajectories.c[name]
            if isinstance(value, str):
                clauses.append(column == value)
            else:
                clauses.append(column.in_([str(v) for v in value]))
        if self.started_after is not None:
            clauses.append(trajectories.c.started_at >= _aware(self.started_after))
        if self.started_before is not None:
            clauses.append(trajectories.c.started_at < _aware(self.started_before))
        if self.ids is not None:
            clauses.append(trajectories.c.id.in_(list(self.ids)))
        if self.has_outcome is not None:
            outcome = (
                sa.select(signals.c.seq)
                .where(
                    signals.c.trajectory_id == trajectories.c.id,
                    signals.c.kind == "outcome",
                    signals.c.step_id.is_(None),
                )
                .exists()
            )
            clauses.append(outcome if self.has_outcome else ~outcome)
        return clauses


def _aware(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


def encode_cursor(started_at: datetime, trajectory_id: str) -> str:
    raw = orjson.dumps([_aware(started_at).isoformat(), trajectory_id])
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        started, trajectory_id = orjson.loads(raw)
        if not isinstance(trajectory_id, str):
            raise TypeError("id is not a string")
        return _aware(datetime.fromisoformat(started)), trajectory_id
    except (ValueError, TypeError, orjson.JSONDecodeError):
        raise InvalidCursor(f"invalid cursor {cursor[:40]!r}: pass back the next_cursor a listing returned") from None
