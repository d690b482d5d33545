"""Applying ATDP events: idempotent, batched, one transaction per call.

Order of work inside the transaction:
1. claim event ids in `applied_events` (INSERT .. ON CONFLICT DO NOTHING RETURNING);
   only newly claimed events are applied, so replays and in-batch duplicates are no-ops;
2. headers: `trajectory_started` inserts the row, or fills in a placeholder;
   any other event for an unknown trajectory creates a placeholder row first, so
   nothing is lost when a step outruns its start (also across batches and writers);
3. steps and signals: bulk inserts (COPY on PostgreSQL, see `pg_copy`; executemany on SQLite),
   ON CONFLICT DO NOTHING on (trajectory, step/signal id);
4. `versions_named` events: fill the header versions still unset;
5. `trajectory_ended` events, in order (the last one wins; metadata merges).

Steps and signals after the end are accepted (late feedback). Events for a
trajectory that was purged are dropped: the ledger remembers its event ids, and
`purged_trajectories` the trajectory (so new events for it stay out too).
An event whose tenant differs from its trajectory's owner fails the whole call.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime
from functools import cache
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from evolvable.errors import StoreError
from evolvable.protocol.models import (
    SignalAttached,
    StepAppended,
    TrajectoryEnded,
    TrajectoryStarted,
    TrajectoryStatus,
    VersionsNamed,
    utcnow,
)
from evolvable.store import pg_copy, sqlite_bulk
from evolvable.store.rows import STEP_COLUMNS, header_row, signal_row, step_row, step_values
from evolvable.store.tables.trajectories import applied_events, purged_trajectories, signals, steps, trajectories
from evolvable.store.tables.types import UTCDateTime

AnyEvent = TrajectoryStarted | StepAppended | SignalAttached | TrajectoryEnded | VersionsNamed
CHUNK = 2000
COPY_MIN_ROWS = 32
"""From this many rows on, PostgreSQL inserts go through COPY (see `pg_copy`)."""
"""Ids per IN (...) list: far below SQLite's and PostgreSQL's bind-parameter limits."""

T = TypeVar("T")


def chunked(items: Sequence[T], size: int = CHUNK) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


@cache
def _statements(dialect: str) -> dict[str, Any]:
    """Statements built once per dialect: building Core constructs per call cost more CPU than running them."""

    def insert(table: sa.Table) -> postgresql.Insert | sqlite.Insert:
        return _dialect_insert(dialect, table)

    t = trajectories.c
    ids: sa.BindParameter[list[str]] = sa.bindparam("ids", expanding=True)
    return {
        "insert_steps": insert(steps).on_conflict_do_nothing(),
        "insert_signals": insert(signals).on_conflict_do_nothing(),
        "insert_trajectories": insert(trajectories).on_conflict_do_nothing(),
        "insert_applied_events": insert(applied_events).on_conflict_do_nothing(),
        "insert_headers": insert(trajectories).on_conflict_do_nothing().returning(t.id),
        # FOR KEY SHARE on PostgreSQL (the lock a foreign key check takes; there is none, see migration 0005):
        # a purge cannot delete a trajectory while a batch appends to it, so no child outlives its parent.
        "existing": _locked(
            dialect,
            sa.select(
                t.id, t.tenant_id, t.placeholder, t.status, t.ended_at, t.header, t.harness_version, t.policy_version
            ).where(t.id.in_(ids)),
        ),
        "purged": sa.select(purged_trajectories.c.id).where(purged_trajectories.c.id.in_(ids)),
        "headers": sa.select(t.id, t.header).where(t.id.in_(ids)),
        "end": sa.update(trajectories)
        .where(t.id == sa.bindparam("b_id"))
        .values(status=sa.bindparam("b_status"), ended_at=sa.bindparam("b_ended_at"), header=sa.bindparam("b_header")),
        "versions": sa.update(trajectories)
        .where(t.id == sa.bindparam("b_id"))
        .values(
            harness_version=sa.func.coalesce(t.harness_version, sa.bindparam("b_harness", type_=sa.String)),
            policy_version=sa.func.coalesce(t.policy_version, sa.bindparam("b_policy", type_=sa.String)),
        ),
    }


def _locked(dialect: str, query: sa.Select[Any]) -> sa.Select[Any]:
    return query.with_for_update(read=True, key_share=True) if dialect == "postgresql" else query


def dialect_insert(conn: sa.Connection, table: sa.Table) -> postgresql.Insert | sqlite.Insert:
    """An INSERT that supports ON CONFLICT for the connection's dialect."""
    return _dialect_insert(conn.dialect.name, table)


def _dialect_insert(dialect: str, table: sa.Table) -> postgresql.Insert | sqlite.Insert:
    return postgresql.insert(table) if dialect == "postgresql" else sqlite.insert(table)


def apply(conn: sa.Connection, events: Sequence[AnyEvent], *, optimistic: bool = False) -> int:
    """Apply events inside the caller's transaction; returns how many were new.

    `optimistic` (PostgreSQL): bulk rows go through COPY with no savepoint, assuming none is stored yet
    (fresh events, the usual case). A row that is raises (`pg_copy.CONFLICTS`) and leaves the transaction
    aborted: the caller rolls back and applies the batch again without `optimistic`."""
    first: dict[str, AnyEvent] = {}
    for e in events:
        first.setdefault(e.event_id, e)  # the first occurrence wins, in its original position
    batch = list(first.values())
    if not batch:
        return 0
    trajectory_ids = list(dict.fromkeys(e.trajectory_id for e in batch))
    existing = _existing(conn, trajectory_ids)
    purged = _purged(conn, [t for t in trajectory_ids if t not in existing])
    claimed = _claim(conn, batch, optimistic)
    new = [e for e in batch if e.event_id in claimed and e.trajectory_id not in purged]
    if not new:
        return 0
    kinds = _by_kind(new)
    _check_tenants(kinds[TrajectoryStarted], new, {tid: row.tenant_id for tid, row in existing.items()})

    starts: dict[str, TrajectoryStarted] = {}
    for e in kinds[TrajectoryStarted]:
        starts.setdefault(e.trajectory_id, e)
    ends = kinds[TrajectoryEnded]
    ended_on_insert = _write_headers(conn, starts, existing, ends, optimistic)
    _write_placeholders(conn, [e for e in new if e.trajectory_id not in existing and e.trajectory_id not in starts])

    step_events = kinds[StepAppended]
    if optimistic and len(step_events) >= COPY_MIN_ROWS:
        # Each row is made (its body serialized) while COPY sends the ones before: the server parses rows
        # on one core while the client makes the next on another, instead of one after the other.
        pg_copy.copy_stream(conn, steps, STEP_COLUMNS, _step_values_for_copy(step_events))
    elif conn.dialect.name == "sqlite":
        step_rows = [step_values(e.trajectory_id, e.step) for e in step_events]
        sqlite_bulk.insert_values_or_ignore(conn, steps, STEP_COLUMNS, step_rows)
    else:
        _insert_new(conn, steps, [step_row(e.trajectory_id, e.step) for e in step_events], optimistic)
    signal_rows = [signal_row(e.trajectory_id, e.signal) for e in kinds[SignalAttached]]
    _insert_new(conn, signals, signal_rows, optimistic)
    _write_versions(conn, kinds[VersionsNamed])
    _write_ends(conn, [e for e in ends if e.trajectory_id not in ended_on_insert])
    return len(new)


_KINDS = (TrajectoryStarted, StepAppended, SignalAttached, TrajectoryEnded, VersionsNamed)


def _by_kind(events: Sequence[AnyEvent]) -> dict[type[Any], list[Any]]:
    """The events of each type, each list in batch order (one pass instead of one per type)."""
    kinds: dict[type[Any], list[Any]] = {kind: [] for kind in _KINDS}
    for e in events:
        bucket = kinds.get(type(e))
        if bucket is None:  # (a subclass)
            bucket = next(kinds[kind] for kind in _KINDS if isinstance(e, kind))
        bucket.append(e)
    return kinds


def _step_values_for_copy(events: Iterable[StepAppended]) -> Iterator[tuple[Any, ...]]:
    for e in events:
        values = step_values(e.trajectory_id, e.step)
        started = values[_STARTED_AT]
        if started.tzinfo is None:  # (naive means UTC, as `UTCDateTime` binds it; binary COPY needs it aware)
            values = (*values[:_STARTED_AT], started.replace(tzinfo=UTC), *values[_STARTED_AT + 1 :])
        yield values


_STARTED_AT = STEP_COLUMNS.index("started_at")


def _insert_new(conn: sa.Connection, table: sa.Table, rows: Sequence[dict[str, Any]], optimistic: bool) -> None:
    """Insert rows, skipping those already stored: SQLite through the driver's executemany; PostgreSQL
    through COPY when there are many (a COPY in a savepoint costs extra round trips), else executemany."""
    if not rows:
        return
    insert = _statements(conn.dialect.name)[f"insert_{table.name}"]
    if conn.dialect.name == "sqlite":
        sqlite_bulk.insert_or_ignore(conn, table, rows)
    elif len(rows) >= COPY_MIN_ROWS:
        pg_copy.copy_insert(conn, table, rows, fallback=insert, optimistic=optimistic)
    else:
        conn.execute(insert, rows)


def _existing(conn: sa.Connection, ids: Sequence[str]) -> dict[str, sa.Row[Any]]:
    out: dict[str, sa.Row[Any]] = {}
    if conn.dialect.name == "sqlite":
        # One plain statement says which exist; a batch of new runs (the usual case) needs no more. The full rows
        # go through a compiled SELECT with an expanding IN list, which SQLAlchemy expands anew for every batch.
        found = sqlite_bulk.existing_keys(conn, trajectories.c.id, ids)
        ids = [tid for tid in ids if tid in found]
    for part in chunked(ids):
        for row in conn.execute(_statements(conn.dialect.name)["existing"], {"ids": list(part)}):
            out[row.id] = row
    return out


def _purged(conn: sa.Connection, missing: Sequence[str]) -> set[str]:
    """Of trajectories that do not exist, those deleted on purpose (`delete_trajectories` leaves a tombstone)."""
    if conn.dialect.name == "sqlite":
        return sqlite_bulk.existing_keys(conn, purged_trajectories.c.id, missing)
    out: set[str] = set()
    for part in chunked(missing):
        out.update(conn.scalars(_statements(conn.dialect.name)["purged"], {"ids": list(part)}))
    return out


def _claim(conn: sa.Connection, batch: Sequence[AnyEvent], optimistic: bool = False) -> set[str]:
    now = utcnow()
    # Sorted, so concurrent writers sharing events lock them in the same order (no deadlocks on PostgreSQL).
    ordered = sorted(batch, key=lambda e: e.event_id)
    if conn.dialect.name == "postgresql":
        rows = [{"event_id": e.event_id, "trajectory_id": e.trajectory_id, "applied_at": now} for e in ordered]
        if optimistic and len(rows) >= COPY_MIN_ROWS:
            pg_copy.copy_rows(conn, applied_events, rows)
            return {e.event_id for e in ordered}
        if len(rows) >= COPY_MIN_ROWS and pg_copy.copy_new_rows(conn, applied_events, rows):
            return {e.event_id for e in ordered}  # none was applied before (the usual case: fresh events)
        # Two array parameters instead of a multi-row VALUES list: psycopg re-parses long statement texts
        # on every call, which made claiming the costliest step of a 1000-event batch.
        return set(
            conn.scalars(
                _PG_CLAIM,
                {"ids": [e.event_id for e in ordered], "tids": [e.trajectory_id for e in ordered], "now": now},
            )
        )
    # SQLite: one writer at a time, so "which are new" then a plain executemany cannot race.
    stored = sqlite_bulk.existing_keys(conn, applied_events.c.event_id, [e.event_id for e in ordered])
    fresh = [e for e in ordered if e.event_id not in stored]
    ledger = [(e.event_id, e.trajectory_id, now) for e in fresh]  # (values, not a dict per row)
    sqlite_bulk.insert_values_or_ignore(conn, applied_events, _LEDGER_COLUMNS, ledger)
    return {e.event_id for e in fresh}


_LEDGER_COLUMNS = ("event_id", "trajectory_id", "applied_at")


_PG_CLAIM = sa.text(
    "INSERT INTO applied_events (event_id, trajectory_id, applied_at) "
    "SELECT u.event_id, u.trajectory_id, :now "
    "FROM unnest(:ids, :tids) WITH ORDINALITY AS u(event_id, trajectory_id, n) "
    "ORDER BY u.n ON CONFLICT DO NOTHING RETURNING event_id"
).bindparams(
    sa.bindparam("ids", type_=postgresql.ARRAY(sa.String)),
    sa.bindparam("tids", type_=postgresql.ARRAY(sa.String)),
    sa.bindparam("now", type_=UTCDateTime()),
)


def _check_tenants(starts: Sequence[TrajectoryStarted], events: Iterable[AnyEvent], owners: dict[str, str]) -> None:
    for start in starts:  # starts name the owner first
        if start.header.tenant_id != start.tenant_id:
            raise StoreError(
                f"event {start.event_id}: header tenant {start.header.tenant_id!r} != event tenant {start.tenant_id!r}"
            )
        _check_owner(start, owners)
    for e in events:  # (starts again: a no-op, their owners are set)
        _check_owner(e, owners)


def _check_owner(e: AnyEvent, owners: dict[str, str]) -> None:
    owner = owners.setdefault(e.trajectory_id, e.tenant_id)
    if owner != e.tenant_id:
        raise StoreError(
            f"event {e.event_id} of tenant {e.tenant_id!r} targets trajectory {e.trajectory_id} of another tenant"
        )


def _write_headers(
    conn: sa.Connection,
    starts: dict[str, TrajectoryStarted],
    existing: dict[str, sa.Row[Any]],
    ends: Sequence[TrajectoryEnded],
    optimistic: bool = False,
) -> set[str]:
    """Insert new trajectories (their end events of this batch already applied) and fill placeholders.

    Returns the trajectories whose ends went into their inserted row: folding them in spares an
    UPDATE of a row with eight indexes, the costliest statement per trajectory on PostgreSQL.
    """
    fresh = sorted((header_row(e.header) for tid, e in starts.items() if tid not in existing), key=lambda r: r["id"])
    _fold_ends(fresh, ends)
    inserted: set[str] = set()
    if fresh and optimistic and len(fresh) >= COPY_MIN_ROWS // 4:
        pg_copy.copy_rows(conn, trajectories, fresh)  # a row another writer made meanwhile: the caller retries
        inserted = {row["id"] for row in fresh}
    elif fresh and conn.dialect.name == "sqlite":
        # One writer at a time (BEGIN IMMEDIATE) and `existing` was read in this transaction: none is stored, so
        # the driver's executemany, with no RETURNING and no per-row SQLAlchemy binding (for one-call
        # trajectories this insert was the store's costliest statement).
        sqlite_bulk.insert_or_ignore(conn, trajectories, fresh)
        inserted = {row["id"] for row in fresh}
    elif fresh:
        inserted = set(conn.scalars(_statements(conn.dialect.name)["insert_headers"], fresh))
    raced = [row["id"] for row in fresh if row["id"] not in inserted]  # another writer made it meanwhile
    rows = dict(existing) | _existing(conn, raced)
    for tid, e in starts.items():
        row = rows.get(tid)
        if row is not None and row.placeholder:
            _fill_placeholder(conn, row, e)
    return inserted


def _fold_ends(rows: Sequence[dict[str, Any]], ends: Sequence[TrajectoryEnded]) -> None:
    """Apply end events to header rows not yet written, exactly as `_write_ends` would afterwards."""
    by_id = {row["id"]: row for row in rows}
    for e in ends:
        row = by_id.get(e.trajectory_id)
        if row is None:
            continue
        row["status"], row["ended_at"] = e.status.value, e.ended_at
        if e.metadata:
            row["header"]["metadata"] = {**row["header"].get("metadata", {}), **e.metadata}


def _fill_placeholder(conn: sa.Connection, row: sa.Row[Any], start: TrajectoryStarted) -> None:
    values = header_row(start.header)
    if row.status != TrajectoryStatus.running.value:  # the end event came before the start
        values["status"], values["ended_at"] = row.status, row.ended_at
    for name in ("harness_version", "policy_version"):  # named by a versions event before the start
        if values[name] is None:
            values[name] = row._mapping[name]
    values["header"]["metadata"] = {**values["header"].get("metadata", {}), **row.header.get("metadata", {})}
    values.pop("id")
    conn.execute(sa.update(trajectories).where(trajectories.c.id == row.id).values(**values))


def _write_placeholders(conn: sa.Connection, orphans: Sequence[AnyEvent]) -> None:
    first: dict[str, AnyEvent] = {}
    earliest: dict[str, datetime] = {}
    for e in orphans:
        first.setdefault(e.trajectory_id, e)
        earliest[e.trajectory_id] = min(earliest.get(e.trajectory_id, e.occurred_at), e.occurred_at)
    if not first:
        return
    rows = [
        {
            "id": tid,
            "tenant_id": e.tenant_id,
            "agent": "default",
            "status": TrajectoryStatus.running.value,
            "started_at": earliest[tid],
            "placeholder": True,
            "header": {},
        }
        for tid, e in sorted(first.items())
    ]
    conn.execute(_statements(conn.dialect.name)["insert_trajectories"], rows)


def _write_versions(conn: sa.Connection, named: Sequence[VersionsNamed]) -> None:
    """Versions first named after the start: each fills only a version the header still lacks."""
    rows = [
        {"b_id": e.trajectory_id, "b_harness": e.harness_version, "b_policy": e.policy_version}
        for e in named
        if e.harness_version is not None or e.policy_version is not None
    ]
    if rows:
        conn.execute(_statements(conn.dialect.name)["versions"], rows)


def _write_ends(conn: sa.Connection, ends: Sequence[TrajectoryEnded]) -> None:
    if not ends:
        return
    final: dict[str, dict[str, Any]] = {}
    ids = list(dict.fromkeys(e.trajectory_id for e in ends))
    for part in chunked(ids):
        for row in conn.execute(_statements(conn.dialect.name)["headers"], {"ids": list(part)}):
            final[row.id] = {"b_id": row.id, "b_header": dict(row.header)}
    for e in ends:
        values = final[e.trajectory_id]
        values["b_status"], values["b_ended_at"] = e.status.value, e.ended_at
        if e.metadata:
            values["b_header"]["metadata"] = {**values["b_header"].get("metadata", {}), **e.metadata}
    conn.execute(_statements(conn.dialect.name)["end"], list(final.values()))
