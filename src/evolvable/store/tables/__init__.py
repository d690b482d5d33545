# ruff: noqa: I001  (table modules are appended one line each, in any order)
"""Every component's tables, on the one SQLAlchemy `MetaData` (defined in `base`).

Each component declares its Core `Table`s in its own module here and imports it
below (one line each), so Alembic sees every table and `Store.open` can create
what no migration covers yet.
"""

from __future__ import annotations

from evolvable.store.tables.base import NAMING_CONVENTION as NAMING_CONVENTION
from evolvable.store.tables.base import metadata as metadata

# Component table modules register themselves on `metadata` (from .base) when imported. Keep one line per module.
from evolvable.store.tables import trajectories as trajectories
from evolvable.store.tables import governance as governance
from evolvable.store.tables import registry as registry
from evolvable.store.tables import proxy as proxy
from evolvable.store.tables import jobs as jobs
from evolvable.store.tables import control_artifacts as control_artifacts
