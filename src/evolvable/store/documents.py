"""Finished runs given as plain documents, applied without building ATDP models.

The capture writer's common record, a model call without a session, is a whole run: a header that already
says how it ended and one llm_call step. Turning it into validated events only for the store to turn those
back into rows cost the writer about half its CPU per call (`benchmarks/writer_floor.py`). A `RunDocuments`
holds the header and steps as the dicts their models dump to (`model_dump()`, datetimes as datetimes), which
their producer guarantees (`proxy.call_documents` builds them from data checked against the models' types,
and the equivalence tests compare the stored rows with the events' path).

Only fresh runs are applied here: a run whose trajectory exists, was purged, or whose event ids are claimed
(a replay after a crash, an id reused) is handed back for the events' path, which knows how to merge it. So
the checks that path makes stay in one place, and these rows are exactly what it would have written.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import sqlalchemy as sa

from evolvable.protocol.models import RunCapture, utcnow
from evolvable.store import ingest, sqlite_bulk
from evolvable.store.engine import RawJSON
from evolvable.store.rows import HEADER_COLUMNS, STEP_COLUMNS
from evolvable.store.tables.trajectories import applied_events, steps, trajectories


@dataclass(slots=True)
class RunDocuments:
    """One finished run: its `TrajectoryHeader` and `Step`s as plain dicts (the shape `model_dump()` gives)."""

    header: dict[str, Any]
    steps: list[dict[str, Any]]
    run: RunCapture
    """The run's agent and the capture it asked for: what a governor decides its capture by."""
    trajectory_id: str = ""
    tenant_id: str = ""
    """Both the header's (filled in from it when not given)."""

    def __post_init__(self) -> None:
        self.trajectory_id = self.trajectory_id or str(self.header["id"])
        self.tenant_id = self.tenant_id or str(self.header["tenant_id"])

    def event_ids(self) -> list[str]:
        """The ids of the events these documents stand for (`trajectory_started`, each `step_appended`), as the
        events' path names them, so a replay through either path is recognized by the other."""
        tid = self.trajectory_id
        return [f"{tid}:start", *(f"{tid}:{step['id']}" for step in self.steps)]


_ORJSON_OPTIONS = orjson.OPT_UTC_Z
_HEADER_ROW_COLUMNS = (*HEADER_COLUMNS, "placeholder", "header")


def header_values(header: dict[str, Any]) -> tuple[Any, ...]:
    """A `trajectories` row in `_HEADER_ROW_COLUMNS` order, as `rows.header_row` makes it from the model."""
    values = [header[name] for name in HEADER_COLUMNS]
    values[_STATUS] = getattr(values[_STATUS], "value", values[_STATUS])
    document = {name: header[name] for name in _DOCUMENT_FIELDS}
    document["capture"] = getattr(document["capture"], "value", document["capture"])
    return (*values, False, document)


_STATUS = HEADER_COLUMNS.index("status")
_DOCUMENT_FIELDS = ("schema_version", "task_input", "capture", "metadata")
"""`rows.HEADER_DOCUMENT_FIELDS` in the order `rows.header_document` writes them."""


def step_values(trajectory_id: str, step: dict[str, Any]) -> tuple[Any, ...]:
    """A `steps` row in `STEP_COLUMNS` order, its body the JSON `rows.dumps_model` writes for the model."""
    return (
        trajectory_id,
        step["id"],
        step["kind"],
        step.get("tool_call_id"),
        step.get("response_id"),
        step["started_at"],
        RawJSON(orjson.dumps(step, option=_ORJSON_OPTIONS).decode()),
    )


def apply_runs(conn: sa.Connection, runs: Sequence[RunDocuments]) -> list[RunDocuments]:
    """Insert the fresh runs inside the caller's transaction; returns the others (see the module), untouched."""
    rows: dict[str, tuple[RunDocuments, list[tuple[Any, ...]]]] = {}
    others: list[RunDocuments] = []
    for run in runs:
        step_rows = _step_rows(run)
        if step_rows is None or run.trajectory_id in rows:  # (twice in a batch: the events' path merges them)
            others.append(run)
        else:
            rows[run.trajectory_id] = (run, step_rows)
    ids = list(rows)
    taken = set(ingest._existing(conn, ids))
    taken |= ingest._purged(conn, [tid for tid in ids if tid not in taken])
    claims = {event_id: tid for tid, (run, _) in rows.items() for event_id in run.event_ids()}
    taken |= {claims[event_id] for event_id in _claimed(conn, list(claims))}
    others += [run for tid, (run, _) in rows.items() if tid in taken]
    fresh = [entry for tid, entry in rows.items() if tid not in taken]
    if fresh:
        _insert(conn, fresh, [(event_id, tid) for event_id, tid in claims.items() if tid not in taken])
    return others


def _step_rows(run: RunDocuments) -> list[tuple[Any, ...]] | None:
    """The run's `steps` rows; None when a body holds a value JSON cannot carry as it is (an int beyond 64 bits,
    ...), which the models' serializer writes its own way: the events' path takes that run."""
    try:
        return [step_values(run.trajectory_id, step) for step in run.steps]
    except TypeError:  # (orjson.JSONEncodeError)
        return None


def _claimed(conn: sa.Connection, event_ids: Sequence[str]) -> set[str]:
    """Which of `event_ids` the ledger holds already."""
    if conn.dialect.name == "sqlite":
        return sqlite_bulk.existing_keys(conn, applied_events.c.event_id, event_ids)
    found: set[str] = set()
    for part in ingest.chunked(event_ids):
        found.update(conn.scalars(_PG_CLAIMED, {"ids": list(part)}))
    return found


_PG_CLAIMED = sa.select(applied_events.c.event_id).where(
    applied_events.c.event_id.in_(sa.bindparam("ids", expanding=True))
)


def _insert(
    conn: sa.Connection, runs: Sequence[tuple[RunDocuments, list[tuple[Any, ...]]]], claims: Sequence[tuple[str, str]]
) -> None:
    """The ledger rows (`claims`: event id, trajectory id), headers and steps of runs none of which is stored
    (checked in this transaction)."""
    now = utcnow()
    # Sorted, as the events' path claims them: writers sharing a PostgreSQL database lock them in one order.
    ledger = sorted((event_id, tid, now) for event_id, tid in claims)
    headers = sorted((header_values(run.header) for run, _ in runs), key=lambda row: row[0])
    step_rows = [row for _, rows in runs for row in rows]
    if conn.dialect.name == "sqlite":  # (one writer at a time: what was checked above cannot change)
        sqlite_bulk.insert_values_or_ignore(conn, applied_events, ingest._LEDGER_COLUMNS, ledger)
        sqlite_bulk.insert_values_or_ignore(conn, trajectories, _HEADER_ROW_COLUMNS, headers)
        sqlite_bulk.insert_values_or_ignore(conn, steps, STEP_COLUMNS, step_rows)
        return
    # PostgreSQL: ON CONFLICT DO NOTHING, so a writer sharing the database that stored one of these meanwhile
    # (the same rows: ids derive from the record) is not an error.
    statements = ingest._statements(conn.dialect.name)
    conn.execute(
        statements["insert_applied_events"], [dict(zip(ingest._LEDGER_COLUMNS, row, strict=True)) for row in ledger]
    )
    conn.execute(statements["insert_trajectories"], [dict(zip(_HEADER_ROW_COLUMNS, r, strict=True)) for r in headers])
    if step_rows:
        conn.execute(statements["insert_steps"], [dict(zip(STEP_COLUMNS, row, strict=True)) for row in step_rows])
