"""The proxy's sessions: which session key belongs to which trajectory. Keys are stored hashed.

No content lives here (task input and metadata are on the trajectory header, after governance).
"""

from __future__ import annotations

import sqlalchemy as sa

from evolvable.store.tables.base import metadata
from evolvable.store.tables.types import UTCDateTime

proxy_sessions = sa.Table(
    "proxy_sessions",
    metadata,
    sa.Column("id", sa.String, primary_key=True, comment="The session id, equal to its trajectory id."),
    sa.Column("tenant_id", sa.String, nullable=False),
    sa.Column("agent", sa.String, nullable=False),
    sa.Column("key_hash", sa.String, nullable=False, comment="sha256 of the session API key."),
    sa.Column("task_id", sa.String),
    sa.Column("end_user", sa.String),
    sa.Column("harness_version", sa.String),
    sa.Column("policy_version", sa.String),
    sa.Column("status", sa.String, nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("ended_at", UTCDateTime),
    sa.Column(
        "minted_by",
        sa.String(64),
        nullable=True,
        comment="The API key that created the session; the session key dies with it.",
    ),
    sa.Index(None, "key_hash", unique=True),
    sa.Index(None, "status"),
    sa.Index(None, "tenant_id"),
)
