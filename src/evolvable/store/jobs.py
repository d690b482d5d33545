"""The training-jobs repository: the only code that reads or writes `training_jobs`."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

import sqlalchemy as sa

from evolvable.errors import NotFound
from evolvable.store.tables.jobs import training_jobs


class JobState(StrEnum):
    queued = "queued"
    running = "running"
    succeeded = "succeeded"
    failed = "failed"
    consumed = "consumed"
    """Succeeded, and the control plane has acted on its result (published, or gated out)."""


LIVE_STATES = (JobState.queued, JobState.running)


@dataclass
class JobRecord:
    id: str
    agent: str
    state: JobState
    launcher: str
    output_dir: str
    spec: dict[str, Any]
    tenant_id: str | None = None
    decision_id: str | None = None
    handle: str | None = None
    progress: dict[str, Any] = field(default_factory=dict)
    result: dict[str, Any] | None = None
    error: str | None = None
    attempts: int = 1
    created_at: datetime | None = None
    updated_at: datetime | None = None


def _record(row: Any) -> JobRecord:
    values = dict(row._mapping)
    values["state"] = JobState(values["state"])
    return JobRecord(**values)


class TrainingJobs:
    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine

    def create(
        self,
        *,
        agent: str,
        launcher: str,
        output_dir: str,
        spec: dict[str, Any],
        tenant_id: str | None = None,
        decision_id: str | None = None,
        job_id: str | None = None,
    ) -> JobRecord:
        now = datetime.now(UTC)
        record = JobRecord(
            id=job_id or f"job-{uuid.uuid4().hex[:16]}",
            agent=agent,
            state=JobState.queued,
            launcher=launcher,
            output_dir=output_dir,
            spec=spec,
            tenant_id=tenant_id,
            decision_id=decision_id,
            created_at=now,
            updated_at=now,
        )
        with self.engine.begin() as conn:
            conn.execute(
                training_jobs.insert().values(
                    id=record.id,
                    tenant_id=tenant_id,
                    agent=agent,
                    decision_id=decision_id,
                    state=record.state.value,
                    launcher=launcher,
                    output_dir=output_dir,
                    spec=spec,
                    progress={},
                    created_at=now,
                    updated_at=now,
                )
            )
        return record

    def get(self, job_id: str) -> JobRecord:
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(training_jobs).where(training_jobs.c.id == job_id)).first()
        if row is None:
            raise NotFound(f"training job {job_id!r} does not exist")
        return _record(row)

    def list(
        self, *, agent: str | None = None, tenant_id: str | None = None, states: Sequence[JobState] = ()
    ) -> list[JobRecord]:
        query = sa.select(training_jobs).order_by(training_jobs.c.created_at)
        if agent is not None:
            query = query.where(training_jobs.c.agent == agent)
        if tenant_id is not None:
            query = query.where(training_jobs.c.tenant_id == tenant_id)
        if states:
            query = query.where(training_jobs.c.state.in_([s.value for s in states]))
        with self.engine.connect() as conn:
            return [_record(row) for row in conn.execute(query)]

    def update(self, job_id: str, *, expect: Sequence[JobState] = (), **changes: Any) -> bool:
        """Change a job's columns; with `expect`, only while its state is one of them (a compare-and-set,
        so two control replicas never both consume a result). True when a row changed."""
        if "state" in changes:
            changes["state"] = JobState(changes["state"]).value
        query = training_jobs.update().where(training_jobs.c.id == job_id)
        if expect:
            query = query.where(training_jobs.c.state.in_([s.value for s in expect]))
        with self.engine.begin() as conn:
            return conn.execute(query.values(**changes, updated_at=datetime.now(UTC))).rowcount == 1
