"""Makes sure the governance tables exist and the audit log cannot be rewritten.

`Store.open` creates every table the metadata declares; the triggers that make `audit_log`
append-only are not metadata, so this hook installs them (idempotently, once per engine). The same
SQL belongs in the Alembic migration; `AUDIT_GUARD_POSTGRESQL` is what the migration should run.
"""

from __future__ import annotations

import threading

import sqlalchemy as sa

from evolvable.store.tables import metadata
from evolvable.store.tables.governance import api_keys, audit_log, dataset_items, datasets, tenants

GOVERNANCE_TABLES = (tenants, api_keys, audit_log, datasets, dataset_items)

AUDIT_GUARD_POSTGRESQL = (
    """CREATE OR REPLACE FUNCTION evolvable_audit_log_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'audit_log is append-only: % is not allowed', TG_OP;
END;
$$""",
    "DROP TRIGGER IF EXISTS audit_log_append_only ON audit_log",
    """CREATE TRIGGER audit_log_append_only BEFORE UPDATE OR DELETE ON audit_log
FOR EACH ROW EXECUTE FUNCTION evolvable_audit_log_append_only()""",
    "DROP TRIGGER IF EXISTS audit_log_no_truncate ON audit_log",
    """CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON audit_log
FOR EACH STATEMENT EXECUTE FUNCTION evolvable_audit_log_append_only()""",
)

AUDIT_GUARD_SQLITE = (
    """CREATE TRIGGER IF NOT EXISTS audit_log_no_update BEFORE UPDATE ON audit_log
BEGIN SELECT RAISE(ABORT, 'audit_log is append-only: UPDATE is not allowed'); END""",
    """CREATE TRIGGER IF NOT EXISTS audit_log_no_delete BEFORE DELETE ON audit_log
BEGIN SELECT RAISE(ABORT, 'audit_log is append-only: DELETE is not allowed'); END""",
)

_ready: set[str] = set()
_lock = threading.Lock()


def _has_pg_trigger(conn: sa.Connection) -> bool:
    found: int = conn.execute(
        sa.text("SELECT count(*) FROM pg_trigger WHERE tgname IN ('audit_log_append_only', 'audit_log_no_truncate')")
    ).scalar_one()
    return found == 2


def ensure_governance_schema(engine: sa.Engine) -> None:
    """Create the governance tables if missing and install the append-only guard on `audit_log`."""
    key = str(engine.url) + f"#{id(engine)}"
    if key in _ready:
        return
    with _lock:
        if key in _ready:
            return
        metadata.create_all(engine, tables=list(GOVERNANCE_TABLES), checkfirst=True)
        with engine.begin() as conn:
            if engine.dialect.name == "postgresql":
                if not _has_pg_trigger(conn):
                    # Serialize concurrent installers (several proxy replicas starting at once).
                    conn.execute(sa.text("SELECT pg_advisory_xact_lock(4242004)"))
                    if not _has_pg_trigger(conn):
                        for statement in AUDIT_GUARD_POSTGRESQL:
                            conn.execute(sa.text(statement))
            elif engine.dialect.name == "sqlite":
                for statement in AUDIT_GUARD_SQLITE:
                    conn.execute(sa.text(statement))
        _ready.add(key)
