"""The one SQLAlchemy `MetaData` every component's tables live on (imported by each table module)."""

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
