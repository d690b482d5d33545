"""Tenants and their API keys (hashes only). Each change commits together with its audit entry."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Protocol

import sqlalchemy as sa

from evolvable.store.repos.audit import AuditRecord, append_in
from evolvable.store.tables.governance import api_keys, tenants

Row = Mapping[str, Any]


class TenantRows(Protocol):
    def tenant(self, tenant_id: str) -> Row | None: ...

    def tenants(self) -> list[Row]:
        """Every tenant, by id."""
        ...

    def insert_tenant(self, row: Row, audit: AuditRecord) -> bool:
        """False (and nothing written) when the id exists."""
        ...

    def update_tenant(self, tenant_id: str, row: Row, audit: AuditRecord) -> None: ...

    def insert_key(self, row: Row, audit: AuditRecord) -> None: ...

    def revoke_key(
        self, key_id: str, tenant_id: str | None, at: datetime, audit: Callable[[Row], AuditRecord]
    ) -> Row | None:
        """Revoke a key not yet revoked (`audit` builds the entry from its row); None when no such key."""
        ...

    def keys(self, *, tenant_id: str | None = None, key_id: str | None = None) -> list[Row]:
        """Keys, oldest first."""
        ...

    def key_by_hash(self, key_hash: str) -> Row | None: ...

    def any_key(self) -> bool: ...

    def key_revoked_at(self, key_id: str) -> tuple[bool, datetime | None]:
        """(exists, revoked_at)."""
        ...


class SqlTenantRows:
    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine

    def tenant(self, tenant_id: str) -> Row | None:
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(tenants).where(tenants.c.id == tenant_id)).first()
        return None if row is None else dict(row._mapping)

    def tenants(self) -> list[Row]:
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(sa.select(tenants).order_by(tenants.c.id))]

    def insert_tenant(self, row: Row, audit: AuditRecord) -> bool:
        with self.engine.begin() as conn:
            if conn.execute(sa.select(tenants.c.id).where(tenants.c.id == row["id"])).first():
                return False
            conn.execute(tenants.insert(), dict(row))
            append_in(conn, audit)
        return True

    def update_tenant(self, tenant_id: str, row: Row, audit: AuditRecord) -> None:
        with self.engine.begin() as conn:
            conn.execute(tenants.update().where(tenants.c.id == tenant_id).values(dict(row)))
            append_in(conn, audit)

    def insert_key(self, row: Row, audit: AuditRecord) -> None:
        with self.engine.begin() as conn:
            conn.execute(api_keys.insert(), dict(row))
            append_in(conn, audit)

    def revoke_key(
        self, key_id: str, tenant_id: str | None, at: datetime, audit: Callable[[Row], AuditRecord]
    ) -> Row | None:
        with self.engine.begin() as conn:
            stmt = sa.select(api_keys).where(api_keys.c.id == key_id)
            if tenant_id is not None:
                stmt = stmt.where(api_keys.c.tenant_id == tenant_id)
            found = conn.execute(stmt).first()
            if found is None:
                return None
            row = dict(found._mapping)
            if row["revoked_at"] is None:
                conn.execute(api_keys.update().where(api_keys.c.id == key_id).values(revoked_at=at))
                append_in(conn, audit(row))
        return row

    def keys(self, *, tenant_id: str | None = None, key_id: str | None = None) -> list[Row]:
        stmt = sa.select(api_keys).order_by(api_keys.c.created_at)
        if tenant_id is not None:
            stmt = stmt.where(api_keys.c.tenant_id == tenant_id)
        if key_id is not None:
            stmt = stmt.where(api_keys.c.id == key_id)
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(stmt)]

    def key_by_hash(self, key_hash: str) -> Row | None:
        k = api_keys.c
        with self.engine.connect() as conn:
            row = conn.execute(
                sa.select(k.id, k.tenant_id, k.is_admin, k.role, k.revoked_at).where(k.key_hash == key_hash)
            ).first()
        return None if row is None else dict(row._mapping)

    def any_key(self) -> bool:
        with self.engine.connect() as conn:
            return conn.execute(sa.select(api_keys.c.id).limit(1)).first() is not None

    def key_revoked_at(self, key_id: str) -> tuple[bool, datetime | None]:
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(api_keys.c.revoked_at).where(api_keys.c.id == key_id)).first()
        return (False, None) if row is None else (True, row.revoked_at)


def tenant_rows(source: TenantRows | sa.Engine) -> TenantRows:
    return SqlTenantRows(source) if isinstance(source, sa.Engine) else source
