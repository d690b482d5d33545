"""Running Alembic from code: no alembic.ini on disk, one chain for every component.

`upgrade(engine)` brings a database to the newest revision. Tables that another
component declared on the shared metadata but that no revision creates yet are
then created directly with `create_all` and named in a warning: development keeps
working, and `schema_diff` (tested) reports the gap until a revision covers them.
Generate that revision with `evolvable db revision -m "..."`.
"""

from __future__ import annotations

import logging
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory

from evolvable.store.tables import metadata

log = logging.getLogger(__name__)

MIGRATIONS_DIR = Path(__file__).with_name("migrations")
_PG_LOCK_KEY = 0x45564F4C  # "EVOL": serializes concurrent migrations of one PostgreSQL database


def alembic_config(connection: sa.Connection | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("version_locations", str(MIGRATIONS_DIR / "versions"))
    config.set_main_option("file_template", "%%(rev)s_%%(slug)s")
    if connection is not None:
        config.attributes["connection"] = connection
    return config


@cache
def head_revision() -> str | None:
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def current_revision(connection: sa.Connection) -> str | None:
    return MigrationContext.configure(connection).get_current_revision()


def upgrade(engine: sa.Engine, *, create_missing: bool = True) -> list[str]:
    """Migrate to head; then create metadata tables no revision made. Returns the names created that way."""
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(sa.select(sa.func.pg_advisory_xact_lock(_PG_LOCK_KEY)))
        if current_revision(conn) != head_revision():
            command.upgrade(alembic_config(conn), "head")
        if not create_missing:
            return []
        existing = set(sa.inspect(conn).get_table_names())
        missing = [t for t in metadata.sorted_tables if t.name not in existing]
        if missing:
            log.warning(
                "tables not created by any migration yet, created from metadata: %s "
                "(run `evolvable db revision -m ...` to add a revision)",
                ", ".join(t.name for t in missing),
            )
            metadata.create_all(conn, tables=missing, checkfirst=True)
        return [t.name for t in missing]


def schema_diff(engine: sa.Engine) -> list[Any]:
    """Alembic's differences between the database and the metadata; empty means they agree."""
    with engine.connect() as conn:
        context = MigrationContext.configure(
            conn, opts={"compare_type": True, "target_metadata": metadata, "render_as_batch": True}
        )
        return list(compare_metadata(context, metadata))


def autogenerate_revision(message: str) -> Path | None:
    """Write a new revision with what the metadata declares beyond head (diffed against a scratch SQLite)."""
    from evolvable.store.engine import create_engine

    with tempfile.TemporaryDirectory() as scratch:
        engine = create_engine(f"sqlite:///{Path(scratch) / 'scratch.db'}")
        try:
            upgrade(engine, create_missing=False)
            with engine.begin() as conn:
                config = alembic_config(conn)
                script = command.revision(config, message=message, autogenerate=True, rev_id=_next_rev_id())
        finally:
            engine.dispose()
    head_revision.cache_clear()
    if script is None or isinstance(script, list):
        return None
    return Path(script.path)


def _next_rev_id() -> str:
    numbers = [int(p.name[:4]) for p in (MIGRATIONS_DIR / "versions").glob("[0-9][0-9][0-9][0-9]_*.py")]
    return f"{max(numbers, default=0) + 1:04d}"
