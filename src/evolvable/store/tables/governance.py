"""Tables of the governance stage: tenants, API keys, the append-only audit log, dataset snapshots.

Keys are stored as SHA-256 digests only (see docs/governance.md for why not scrypt). The audit log
has no update or delete path in code, and a trigger on both SQLite and PostgreSQL rejects UPDATE and
DELETE (installed by migration 0002, the only schema authority). Dataset items hold a
copy of each trajectory so a snapshot stays immutable while late signals change the store; purges
delete those copies too.
"""

from __future__ import annotations

import sqlalchemy as sa

from evolvable.store.tables.base import metadata
from evolvable.store.tables.types import AutoIncrementBigInt, JSONDocument, UTCDateTime

tenants = sa.Table(
    "tenants",
    metadata,
    sa.Column("id", sa.String(200), primary_key=True),
    sa.Column("name", sa.String(200), nullable=False),
    sa.Column("capture", sa.String(16), nullable=False, server_default="full", comment="full | metadata | off"),
    sa.Column("agent_capture", JSONDocument, nullable=False, comment="Per-agent capture overrides {agent: mode}."),
    sa.Column("retention_days", sa.Integer, nullable=True, comment="None keeps data until purged."),
    sa.Column("redact_upstream", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("updated_at", UTCDateTime, nullable=False),
)

api_keys = sa.Table(
    "api_keys",
    metadata,
    sa.Column("id", sa.String(64), primary_key=True),
    sa.Column("tenant_id", sa.String(200), nullable=False, index=True),
    sa.Column("key_hash", sa.String(64), nullable=False, unique=True, comment="sha256 hex of the whole key."),
    sa.Column("label", sa.String(200), nullable=False, server_default=""),
    sa.Column("is_admin", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column(
        "role",
        sa.String(16),
        nullable=True,
        comment="operator | admin | tenant; NULL: admin if is_admin else tenant (keys issued before roles).",
    ),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("revoked_at", UTCDateTime, nullable=True),
)

audit_log = sa.Table(
    "audit_log",
    metadata,
    sa.Column("id", AutoIncrementBigInt, primary_key=True, autoincrement=True),
    sa.Column("at", UTCDateTime, nullable=False, index=True),
    sa.Column("actor", sa.String(200), nullable=False, comment="API key id, 'cli', 'system' or 'env-admin'."),
    sa.Column("tenant_id", sa.String(200), nullable=True, index=True),
    sa.Column("action", sa.String(32), nullable=False, index=True),
    sa.Column("target", sa.String(500), nullable=False, server_default=""),
    sa.Column("details", JSONDocument, nullable=False),
)

datasets = sa.Table(
    "datasets",
    metadata,
    sa.Column("id", sa.String(64), primary_key=True),
    sa.Column("tenant_id", sa.String(200), nullable=False, comment="'*': built across tenants by an operator."),
    sa.Column("name", sa.String(200), nullable=False),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("filter", JSONDocument, nullable=False),
    sa.Column("curation", JSONDocument, nullable=False, comment="Quality filters and dedup mode used."),
    sa.Column("counts", JSONDocument, nullable=False),
    sa.Column("content_hash", sa.String(80), nullable=False),
    sa.Column("created_by", sa.String(200), nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("exported_at", UTCDateTime, nullable=True),
    sa.Column("invalidated_at", UTCDateTime, nullable=True),
    sa.Column("invalidated_reason", sa.Text, nullable=True),
    sa.UniqueConstraint("tenant_id", "name", "version", name="uq_datasets_tenant_name_version"),
)

dataset_items = sa.Table(
    "dataset_items",
    metadata,
    sa.Column("dataset_id", sa.String(64), primary_key=True),
    sa.Column("position", sa.Integer, primary_key=True),
    sa.Column("trajectory_id", sa.String(200), nullable=False, index=True),
    sa.Column("tenant_id", sa.String(200), nullable=False, index=True),
    sa.Column("end_user", sa.String(200), nullable=True, index=True),
    sa.Column("harness_version", sa.String(200), nullable=True),
    sa.Column("policy_version", sa.String(200), nullable=True),
    sa.Column("started_at", UTCDateTime, nullable=False, comment="Retention applies to copies too."),
    sa.Column("content_hash", sa.String(64), nullable=False),
    sa.Column("trajectory", JSONDocument, nullable=False, comment="ATDP JSON as it was at snapshot time."),
)
