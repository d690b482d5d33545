"""Training jobs: what the control plane launched, where it runs, and how it ended.

A job outlives the process that launched it (a `serve` restart re-attaches by `pid` / `handle`), so
its state lives here, not in memory.
"""

from __future__ import annotations

import sqlalchemy as sa

from evolvable.store.tables.base import metadata
from evolvable.store.tables.types import UTCDateTime

training_jobs = sa.Table(
    "training_jobs",
    metadata,
    sa.Column("id", sa.String(64), primary_key=True),
    sa.Column("tenant_id", sa.String(200)),
    sa.Column("agent", sa.String(200), nullable=False),
    sa.Column("decision_id", sa.String(64), comment="The control decision that asked for this job."),
    sa.Column("state", sa.String(16), nullable=False, comment="queued | running | succeeded | failed | consumed"),
    sa.Column("launcher", sa.String(64), nullable=False),
    sa.Column("handle", sa.String(500), comment="The launcher's id of the running job: a pid, a Slurm job id..."),
    sa.Column("output_dir", sa.Text, nullable=False),
    sa.Column("spec", sa.JSON, nullable=False, comment="Config, data lineage (trajectory ids, windows), policy."),
    sa.Column("progress", sa.JSON, nullable=False, comment="Latest progress and metrics the job reported."),
    sa.Column("result", sa.JSON, comment="The finished job's result: adapter, snapshots, metrics."),
    sa.Column("error", sa.Text),
    sa.Column("attempts", sa.Integer, nullable=False, server_default="1"),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("updated_at", UTCDateTime, nullable=False),
    sa.Index(None, "agent", "state"),
)
