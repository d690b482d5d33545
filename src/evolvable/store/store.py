"""The trajectory store: the one place trajectories are written and read."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from pydantic import TypeAdapter, ValidationError

from evolvable.errors import NotFound, ProtocolError, StoreError
from evolvable.protocol.models import Event, Trajectory, TrajectoryHeader, TrajectoryStatus, events_for, utcnow
from evolvable.store import documents, ingest, migrate, pg_copy, reads
from evolvable.store.documents import RunDocuments
from evolvable.store.engine import WRITE_OPTIONS, create_engine, redacted
from evolvable.store.filters import TrajectoryFilter, decode_cursor, encode_cursor
from evolvable.store.rows import assemble, header_from_row
from evolvable.store.tables.trajectories import purged_trajectories, signals, steps, trajectories

log = logging.getLogger(__name__)

EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event)
_T = trajectories.c


class Store:
    """Trajectories on SQLite (embedded) or PostgreSQL. Thread-safe: share one per process."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
        self._writer = engine.execution_options(**WRITE_OPTIONS)

    @classmethod
    def open(cls, url: str | None = None, *, migrate_schema: bool = True) -> Store:
        """Connect and migrate to the newest schema. None means the settings' database (embedded SQLite by default)."""
        if url is None:
            from evolvable.settings import get_settings

            url = get_settings().resolved_db_url()
        engine = create_engine(url)
        try:
            if migrate_schema:
                migrate.upgrade(engine)
            else:
                with engine.connect() as conn:
                    conn.execute(sa.text("select 1"))
        except StoreError:  # already says what is wrong (e.g. `UnmigratedTables`)
            engine.dispose()
            raise
        except sa.exc.SQLAlchemyError as err:
            engine.dispose()
            raise StoreError(f"cannot open the store at {redacted(url)}: {err.__class__.__name__}: {err}") from err
        return cls(engine)

    def close(self) -> None:
        self.engine.dispose()

    def forget_pooled_connections(self) -> None:
        """Drop pooled connections without closing their sockets: a forked child must not share its parent's."""
        self.engine.dispose(close=False)

    def healthy(self) -> bool:
        """Whether the database answers now (a writer tells an outage from a bad record by it)."""
        try:
            with self.engine.connect() as conn:
                conn.execute(sa.text("select 1"))
            return True
        except Exception:
            return False

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store({redacted(self.engine.url)})"

    # ----------------------------------------------------------------- writes

    def apply_events(self, events: Iterable[Event | Mapping[str, Any]]) -> int:
        """Apply ATDP events in one transaction; returns how many were new (replays count 0)."""
        parsed = [e if not isinstance(e, Mapping) else _parse_event(e) for e in events]
        if not parsed:
            return 0
        optimistic = self.engine.dialect.name == "postgresql" and len(parsed) >= ingest.COPY_MIN_ROWS
        try:
            if optimistic:
                try:
                    with self._writer.begin() as conn:
                        return ingest.apply(conn, parsed, optimistic=True)
                except pg_copy.CONFLICTS:
                    pass  # a row was stored already (a replay): again, skipping stored rows one table at a time
            with self._writer.begin() as conn:
                return ingest.apply(conn, parsed)
        except sa.exc.SQLAlchemyError as err:
            raise StoreError(f"writing {len(parsed)} events failed: {err.__class__.__name__}: {err}") from err

    def apply_runs(self, runs: Sequence[RunDocuments]) -> list[RunDocuments]:
        """Store finished runs given as documents, in one transaction; returns those to apply as events instead
        (stored already, purged, or claimed: see `documents`)."""
        if not runs:
            return []
        try:
            with self._writer.begin() as conn:
                return documents.apply_runs(conn, runs)
        except sa.exc.SQLAlchemyError as err:
            raise StoreError(f"writing {len(runs)} runs failed: {err.__class__.__name__}: {err}") from err

    def put_trajectory(self, trajectory: Trajectory) -> None:
        """Store a whole trajectory (idempotent: its event ids derive from its ids)."""
        self.apply_events(events_for(trajectory))

    def delete_trajectories(self, f: TrajectoryFilter, *, batch_size: int = 500) -> int:
        """Purge matching trajectories with their steps and signals; returns how many were removed.

        Their event ids stay in the ledger and each leaves a tombstone, so no replayed or late event brings it back.
        An empty filter is refused: say what to delete.
        """
        if f.is_empty():
            raise StoreError("refusing to delete with an empty filter")
        removed = 0
        while True:
            with self._writer.begin() as conn:
                ids = list(conn.scalars(sa.select(_T.id).where(*f.where()).limit(batch_size)))
                if not ids:
                    return removed
                # Parents first: on PostgreSQL this waits for writers holding them (ingest locks the parents it
                # appends to), so the children deleted next include theirs (no foreign key cascades them).
                gone = list(conn.scalars(sa.delete(trajectories).where(_T.id.in_(ids)).returning(_T.id)))
                conn.execute(sa.delete(steps).where(steps.c.trajectory_id.in_(gone)))
                conn.execute(sa.delete(signals).where(signals.c.trajectory_id.in_(gone)))
                if gone:  # tombstones: events for these trajectories are dropped from now on
                    now = utcnow()
                    tombstones = [{"id": tid, "purged_at": now} for tid in gone]
                    conn.execute(ingest.dialect_insert(conn, purged_trajectories).on_conflict_do_nothing(), tombstones)
                removed += len(gone)

    # ----------------------------------------------------------------- reads

    def get_trajectory(self, trajectory_id: str, tenant_id: str | None = None) -> Trajectory:
        """The whole trajectory. Another tenant's id raises NotFound, exactly like a missing one."""
        with self.engine.connect() as conn:
            found = reads.trajectory_texts(conn, reads.BY_ID, {"trajectory_id": trajectory_id})
        if not found or (tenant_id is not None and found[0][0]["tenant_id"] != tenant_id):
            raise NotFound(f"trajectory {trajectory_id} not found")
        return assemble(*found[0])

    def get_header(self, trajectory_id: str, tenant_id: str | None = None) -> TrajectoryHeader:
        """The header alone (no steps or signals); NotFound as for get_trajectory."""
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(trajectories).where(_T.id == trajectory_id)).mappings().first()
        if row is None or (tenant_id is not None and row["tenant_id"] != tenant_id):
            raise NotFound(f"trajectory {trajectory_id} not found")
        return header_from_row(row)

    def list_trajectories(
        self, f: TrajectoryFilter, limit: int = 50, cursor: str | None = None
    ) -> tuple[list[TrajectoryHeader], str | None]:
        """One page of headers, newest first; pass the returned cursor back for the next page (None: no more)."""
        if limit < 1:
            raise StoreError("limit must be at least 1")
        query = sa.select(trajectories).where(*f.where())
        if cursor is not None:
            started, last_id = decode_cursor(cursor)
            query = query.where(sa.tuple_(_T.started_at, _T.id) < sa.tuple_(started, last_id))
        query = query.order_by(_T.started_at.desc(), _T.id.desc()).limit(limit + 1)
        with self.engine.connect() as conn:
            rows = conn.execute(query).mappings().all()
        page = [header_from_row(r) for r in rows[:limit]]
        next_cursor = encode_cursor(page[-1].started_at, page[-1].id) if len(rows) > limit else None
        return page, next_cursor

    def iter_trajectories(self, f: TrajectoryFilter, batch_size: int = 200) -> Iterator[Trajectory]:
        """Every matching trajectory, oldest first, `batch_size` at a time (memory stays bounded).

        Keyset batches, each on a short-lived connection: no transaction is held open
        while the caller works, and rows written meanwhile after the position are seen.
        """
        if batch_size < 1:
            raise StoreError("batch_size must be at least 1")
        position: tuple[Any, str] | None = None
        while True:
            query = sa.select(trajectories).where(*f.where())
            if position is not None:
                query = query.where(sa.tuple_(_T.started_at, _T.id) > sa.tuple_(*position))
            with self.engine.connect() as conn:
                batch = reads.trajectory_texts(conn, query.order_by(_T.started_at, _T.id).limit(batch_size))
            for texts in batch:
                yield assemble(*texts)
            if len(batch) < batch_size:
                return
            last = batch[-1][0]
            position = (last["started_at"], last["id"])
            del batch

    def ended_between(self, since: datetime, before: datetime, limit: int) -> list[tuple[str, datetime]]:
        """(id, ended_at) of runs that ended in [since, before), oldest first (placeholders never count)."""
        query = (
            sa.select(_T.id, _T.ended_at)
            .where(
                _T.ended_at >= since,
                _T.ended_at < before,
                _T.status != TrajectoryStatus.running.value,
                _T.placeholder.is_(False),
            )
            .order_by(_T.ended_at, _T.id)
            .limit(limit)
        )
        with self.engine.connect() as conn:
            return [(r.id, r.ended_at) for r in conn.execute(query)]

    def schema_revision(self) -> str | None:
        """The migration the database is at (None: never migrated)."""
        with self.engine.connect() as conn:
            return migrate.current_revision(conn)

    def count(self, f: TrajectoryFilter) -> int:
        with self.engine.connect() as conn:
            return int(conn.scalar(sa.select(sa.func.count()).select_from(trajectories).where(*f.where())) or 0)

    def find_step(
        self, trajectory_id: str, *, tool_call_id: str | None = None, response_id: str | None = None
    ) -> str | None:
        """The id of the step a client-side id refers to, or None.

        `tool_call_id`: the tool_call step carrying it, else the llm_call step whose answer requested it.
        `response_id`: the llm_call step with that upstream response id.
        """
        if (tool_call_id is None) == (response_id is None):
            raise StoreError("find_step needs exactly one of tool_call_id, response_id")
        s = steps.c
        with self.engine.connect() as conn:
            if response_id is not None:
                query = sa.select(s.step_id).where(s.trajectory_id == trajectory_id, s.response_id == response_id)
                by_response: str | None = conn.scalar(query.order_by(s.seq).limit(1))
                return by_response
            query = sa.select(s.step_id).where(s.trajectory_id == trajectory_id, s.tool_call_id == tool_call_id)
            found: str | None = conn.scalar(query.order_by(s.seq).limit(1))
            if found is not None:
                return found
            llm_steps = conn.execute(
                sa.select(s.step_id, s.body)
                .where(s.trajectory_id == trajectory_id, s.kind == "llm_call")
                .order_by(s.seq)
            )
            for step_id, body in llm_steps:
                for choice in body.get("choices") or []:
                    for call in (choice.get("message") or {}).get("tool_calls") or []:
                        if call.get("id") == tool_call_id:
                            return str(step_id)
        return None


def _parse_event(raw: Mapping[str, Any]) -> Event:
    try:
        return EVENT_ADAPTER.validate_python(raw)
    except ValidationError as err:
        reasons = [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in err.errors()]
        raise ProtocolError("invalid ATDP event", reasons) from None


def events_of(trajectories_: Sequence[Trajectory]) -> list[Event]:
    """All events that rebuild these trajectories, in order (for bulk imports)."""
    return [e for t in trajectories_ for e in events_for(t)]
