"""Versioned control artefacts: the task clusterer fitted from each (tenant, agent)'s recorded inputs.

A clusterer is data, not code: its vocabulary, idf weights and centroids (JSON), so every replica
assigns the same cluster to the same text, and a refit is a new row (version + 1) with the reason.
"""

from __future__ import annotations

import sqlalchemy as sa

from evolvable.store.tables.base import metadata

control_clusterers = sa.Table(
    "control_clusterers",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("tenant", sa.String(200), nullable=False),
    sa.Column("agent", sa.String(200), nullable=False),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("method", sa.String(32), nullable=False),
    sa.Column("k", sa.Integer, nullable=False),
    sa.Column("fitted_on", sa.Integer, nullable=False, comment="Task inputs the clusterer was fitted on."),
    sa.Column("reason", sa.Text, nullable=False, server_default=""),
    sa.Column("artifact", sa.JSON, nullable=False, comment="Vocabulary, idf and centroids."),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.UniqueConstraint("tenant", "agent", "version"),
)
