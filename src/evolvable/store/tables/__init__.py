# ruff: noqa: I001  (table modules are appended one line each, in any order)
"""The one SQLAlchemy `MetaData` every component's tables live on.

Each component declares its Core `Table`s in its own module here and imports it
below (one line each), so Alembic sees every table and `Store.open` can create
what no migration covers yet.
"""

from __future__ import annotations

import sqlalchemy as sa

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}
"""Deterministic constraint names, so migrations (and SQLite batch rebuilds) can refer to them."""

metadata = sa.MetaData(naming_convention=NAMING_CONVENTION)

# Component table modules register themselves on `metadata` when imported. Keep one line per module.
from evolvable.store.tables import trajectories as trajectories  # noqa: E402
from evolvable.store.tables import governance as governance  # noqa: E402
from evolvable.store.tables import registry as registry  # noqa: E402
from evolvable.store.tables import proxy as proxy  # noqa: E402
from evolvable.store.tables import jobs as jobs  # noqa: E402
from evolvable.store.tables import control_artifacts as control_artifacts  # noqa: E402
