"""Retention: each tenant's data older than its retention period is erased, store and dataset copies.

`RetentionJob.run_once(now)` is what both the background loop (mounted in the proxy's lifespan)
and `evolvable retention run` call. A run is a purge with a cut-off time, audited as `retention`.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timedelta

from pydantic import BaseModel

from evolvable.governance.audit import AuditAction, AuditLog
from evolvable.governance.purge import Purger, PurgeRequest
from evolvable.governance.tenants import TenantDirectory
from evolvable.protocol.models import utcnow
from evolvable.store import Store

log = logging.getLogger("evolvable.governance.retention")


class RetentionResult(BaseModel):
    tenant_id: str
    retention_days: int
    cutoff: datetime
    trajectories: int
    dataset_items: int


class RetentionJob:
    def __init__(self, store: Store, *, directory: TenantDirectory | None = None, purger: Purger | None = None) -> None:
        self.store = store
        audit = AuditLog(store.engine)
        self.directory = directory or TenantDirectory(store.engine, audit=audit)
        self.purger = purger or Purger(store, audit=audit)

    def run_once(self, now: datetime | None = None, *, actor: str = "system") -> list[RetentionResult]:
        """Erase, for every tenant with a retention period, the runs that started before now - period."""
        now = now or utcnow()
        results = []
        for tenant in self.directory.list_tenants():
            if tenant.retention_days is None:
                continue
            cutoff = now - timedelta(days=tenant.retention_days)
            report = self.purger.purge(
                PurgeRequest(tenant_id=tenant.id, started_before=cutoff),
                actor=actor,
                action=AuditAction.retention,
                audit_empty=False,
            )
            results.append(
                RetentionResult(
                    tenant_id=tenant.id,
                    retention_days=tenant.retention_days,
                    cutoff=cutoff,
                    trajectories=report.trajectories,
                    dataset_items=report.dataset_items,
                )
            )
        return results


async def retention_loop(store: Store, interval_s: float = 3600.0, *, job: RetentionJob | None = None) -> None:
    """Run retention every `interval_s` until cancelled; errors are logged, never fatal to the proxy."""
    job = job or RetentionJob(store)
    while True:
        try:
            results = await asyncio.to_thread(job.run_once)
            erased = sum(r.trajectories for r in results)
            if erased:
                log.info("retention erased %d trajectories", erased)
        except Exception:
            log.exception("retention run failed; retrying in %.0f s", interval_s)
        await asyncio.sleep(interval_s)
