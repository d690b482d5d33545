"""Versioned task-clusterer artefacts per (tenant, agent): the control plane's fitted TF-IDF k-means."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Protocol

import sqlalchemy as sa

from evolvable.store.repos.base import now, utc, write_transaction
from evolvable.store.tables.control_artifacts import control_clusterers

_C = control_clusterers.c


class ClustererRows(Protocol):
    def add(self, tenant: str, agent: str, fields: Mapping[str, Any]) -> tuple[int, datetime]:
        """Store the next version for (tenant, agent); returns (version, created_at)."""
        ...

    def heads(self, *, tenant: str | None, agent: str | None) -> list[tuple[str, str, int]]:
        """(tenant, agent, newest version) of every clusterer in scope."""
        ...

    def artifact(self, tenant: str, agent: str, version: int) -> tuple[dict[str, Any], datetime]: ...


class SqlClustererRows:
    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine

    def add(self, tenant: str, agent: str, fields: Mapping[str, Any]) -> tuple[int, datetime]:
        with write_transaction(self.engine) as conn:
            latest = conn.execute(
                sa.select(sa.func.max(_C.version)).where(_C.tenant == tenant, _C.agent == agent)
            ).scalar()
            version, created = int(latest or 0) + 1, now()
            conn.execute(
                control_clusterers.insert().values(
                    tenant=tenant, agent=agent, version=version, created_at=created, **fields
                )
            )
        return version, created

    def heads(self, *, tenant: str | None, agent: str | None) -> list[tuple[str, str, int]]:
        newest = sa.select(_C.tenant, _C.agent, sa.func.max(_C.version)).group_by(_C.tenant, _C.agent)
        if tenant is not None:
            newest = newest.where(_C.tenant == tenant)
        if agent is not None:
            newest = newest.where(_C.agent == agent)
        with self.engine.connect() as conn:
            return [(t, a, int(v)) for t, a, v in conn.execute(newest)]

    def artifact(self, tenant: str, agent: str, version: int) -> tuple[dict[str, Any], datetime]:
        with self.engine.connect() as conn:
            row = conn.execute(
                sa.select(_C.artifact, _C.created_at).where(
                    _C.tenant == tenant, _C.agent == agent, _C.version == version
                )
            ).one()
        created = utc(row.created_at)
        assert created is not None  # the column is NOT NULL
        return row.artifact, created


def clusterer_rows(source: ClustererRows | sa.Engine) -> ClustererRows:
    return SqlClustererRows(source) if isinstance(source, sa.Engine) else source
