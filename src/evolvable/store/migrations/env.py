"""Alembic environment. Runs from `evolvable.store.migrate` with a live connection in
`config.attributes["connection"]` (no alembic.ini on disk), or offline for SQL scripts."""

from __future__ import annotations

from typing import Any, Literal

import sqlalchemy as sa
from alembic import context
from alembic.autogenerate.api import AutogenContext
from sqlalchemy.dialects import postgresql

from evolvable.store.tables import metadata
from evolvable.store.tables.types import UTCDateTime

config = context.config


def render_item(type_: str, obj: Any, autogen_context: AutogenContext) -> str | Literal[False]:
    """Migrations describe plain SQL types, never our Python wrappers, so old revisions never break on refactors."""
    if type_ == "type" and isinstance(obj, UTCDateTime):
        return "sa.DateTime(timezone=True)"
    if type_ == "type" and isinstance(obj, postgresql.JSONB):
        autogen_context.imports.add("from sqlalchemy.dialects import postgresql")
        return "postgresql.JSONB()"
    if type_ == "server_default" and isinstance(obj, sa.DefaultClause):
        # Rendered portably: the scratch SQLite would otherwise print `sa.text('0')`, which PostgreSQL rejects.
        if isinstance(obj.arg, sa.sql.elements.False_):
            return "sa.false()"
        if isinstance(obj.arg, sa.sql.elements.True_):
            return "sa.true()"
    return False


def _configure(**kwargs: Any) -> None:
    context.configure(
        target_metadata=metadata,
        compare_type=True,
        compare_server_default=False,
        render_item=render_item,
        **kwargs,
    )


def run_migrations_offline() -> None:
    _configure(url=config.get_main_option("sqlalchemy.url"), literal_binds=True, dialect_opts={"paramstyle": "named"})
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes["connection"]
    _configure(connection=connection, render_as_batch=connection.dialect.name == "sqlite")
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
