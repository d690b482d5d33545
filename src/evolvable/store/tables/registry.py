"""Tables of the evolution control plane: versioned artifacts, their transitions, decisions, rollouts, leases.

One `registry_versions` table holds both harness and policy versions (column `kind`): they share
states, lineage and the transition log, and the proxy reads both in one query when it refreshes.
Partial unique indexes make "at most one active and one canary per tenant, agent and kind" a
database guarantee, so two control-plane replicas cannot both promote. Every row carries its
tenant: control's view of an agent is (tenant, agent), never mixing tenants.
"""

from __future__ import annotations

import sqlalchemy as sa

from evolvable.store.tables.base import metadata

registry_versions = sa.Table(
    "registry_versions",
    metadata,
    sa.Column("id", sa.String(64), primary_key=True, comment="Content address: h1-... (harness), p1-... (policy)."),
    sa.Column("kind", sa.String(16), nullable=False),
    sa.Column("agent", sa.String(200), nullable=False),
    sa.Column("tenant", sa.String(200), nullable=False, server_default="default"),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("parent_id", sa.String(64), nullable=True),
    sa.Column("content", sa.JSON, nullable=False, comment="Harness JSON, or the policy spec (base, adapter)."),
    sa.Column("lineage", sa.JSON, nullable=False, comment="Data snapshot, config, metrics, decision id."),
    sa.Column("note", sa.Text, nullable=False, server_default=""),
    sa.Column("created_by", sa.String(200), nullable=False, server_default="user"),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    sa.Index("ix_registry_versions_agent_kind", "agent", "kind", "state"),
    sa.Index(
        "uq_registry_one_active_tenant",
        "tenant",
        "agent",
        "kind",
        unique=True,
        sqlite_where=sa.text("state = 'active'"),
        postgresql_where=sa.text("state = 'active'"),
    ),
    sa.Index(
        "uq_registry_one_canary_tenant",
        "tenant",
        "agent",
        "kind",
        unique=True,
        sqlite_where=sa.text("state = 'canary'"),
        postgresql_where=sa.text("state = 'canary'"),
    ),
)

registry_transitions = sa.Table(
    "registry_transitions",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("version_id", sa.String(64), nullable=False, index=True),
    sa.Column("kind", sa.String(16), nullable=False),
    sa.Column("agent", sa.String(200), nullable=False),
    sa.Column("tenant", sa.String(200), nullable=False, server_default="default"),
    sa.Column("from_state", sa.String(16), nullable=True),
    sa.Column("to_state", sa.String(16), nullable=False),
    sa.Column("reason", sa.Text, nullable=False, server_default=""),
    sa.Column("actor", sa.String(200), nullable=False, server_default="user"),
    sa.Column("at", sa.DateTime(timezone=True), nullable=False),
)

control_decisions = sa.Table(
    "control_decisions",
    metadata,
    sa.Column("id", sa.String(64), primary_key=True),
    sa.Column("agent", sa.String(200), nullable=False, index=True),
    sa.Column("tenant", sa.String(200), nullable=False, server_default="default", index=True),
    sa.Column("lever", sa.String(16), nullable=False),
    sa.Column("state", sa.String(24), nullable=False, index=True),
    sa.Column("rationale", sa.Text, nullable=False, server_default=""),
    sa.Column("evidence", sa.JSON, nullable=False),
    sa.Column("predicted", sa.JSON, nullable=False),
    sa.Column("candidate_kind", sa.String(16), nullable=True),
    sa.Column("candidate_version", sa.String(64), nullable=True),
    sa.Column("baseline_version", sa.String(64), nullable=True),
    sa.Column("gates", sa.JSON, nullable=False),
    sa.Column("rollout_id", sa.String(64), nullable=True),
    sa.Column("requires_approval", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("approved_by", sa.String(200), nullable=True),
    sa.Column("verdict", sa.String(24), nullable=True),
    sa.Column("verdict_detail", sa.JSON, nullable=True),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
)

control_rollouts = sa.Table(
    "control_rollouts",
    metadata,
    sa.Column("id", sa.String(64), primary_key=True),
    sa.Column("agent", sa.String(200), nullable=False, index=True),
    sa.Column("tenant", sa.String(200), nullable=False, server_default="default", index=True),
    sa.Column("kind", sa.String(16), nullable=False),
    sa.Column("decision_id", sa.String(64), nullable=True),
    sa.Column("candidate_version", sa.String(64), nullable=False),
    sa.Column("baseline_version", sa.String(64), nullable=True),
    sa.Column("share", sa.Float, nullable=False),
    sa.Column("state", sa.String(16), nullable=False, index=True),
    sa.Column("extensions", sa.Integer, nullable=False, server_default="0"),
    sa.Column("analyses", sa.JSON, nullable=False),
    sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
)

control_leases = sa.Table(
    "control_leases",
    metadata,
    sa.Column("name", sa.String(100), primary_key=True),
    sa.Column("holder", sa.String(200), nullable=False),
    sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
)
