"""Running Alembic from code: no alembic.ini on disk, one chain for every component.

`upgrade(engine)` brings a database to the newest revision. Migrations are the only
schema authority: a table a component declared on the shared metadata that no revision
creates is an error (`UnmigratedTables`, naming it), never created behind the chain's
back, so every database reaches its schema the same way. Generate the missing revision
with `evolvable db revision -m "..."`.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory

from evolvable.errors import UnmigratedTables
from evolvable.store.engine import WRITE_OPTIONS
from evolvable.store.tables import metadata

MIGRATIONS_DIR = Path(__file__).with_name("migrations")
_PG_LOCK_KEY = 0x45564F4C  # "EVOL": serializes concurrent migrations of one PostgreSQL database


def alembic_config(connection: sa.Connection | None = None, migrations_dir: Path = MIGRATIONS_DIR) -> Config:
    config = Config()
    config.set_main_option("script_location", str(migrations_dir))
    config.set_main_option("version_locations", str(migrations_dir / "versions"))
    config.set_main_option("file_template", "%%(rev)s_%%(slug)s")
    if connection is not None:
        config.attributes["connection"] = connection
    return config


@cache
def head_revision(migrations_dir: Path = MIGRATIONS_DIR) -> str | None:
    return ScriptDirectory.from_config(alembic_config(None, migrations_dir)).get_current_head()


def current_revision(connection: sa.Connection) -> str | None:
    return MigrationContext.configure(connection).get_current_revision()


def upgrade(engine: sa.Engine, *, migrations_dir: Path = MIGRATIONS_DIR) -> None:
    """Migrate to head; `UnmigratedTables`, with nothing migrated, when the metadata declares a table that
    no revision creates."""
    with _migrating(engine, migrations_dir) as conn:
        existing = set(sa.inspect(conn).get_table_names())
        missing = [t.name for t in metadata.sorted_tables if t.name not in existing]
        if missing:
            raise UnmigratedTables(missing)


@contextmanager
def _migrating(engine: sa.Engine, migrations_dir: Path) -> Iterator[sa.Connection]:
    """A transaction holding the database at head (migrated in it when behind); commits on leaving."""
    # Serialize concurrent openers: BEGIN IMMEDIATE on SQLite, an advisory lock on PostgreSQL.
    with engine.execution_options(**WRITE_OPTIONS).begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(sa.select(sa.func.pg_advisory_xact_lock(_PG_LOCK_KEY)))
        if current_revision(conn) != head_revision(migrations_dir):
            command.upgrade(alembic_config(conn, migrations_dir), "head")
        yield conn


def schema_diff(engine: sa.Engine) -> list[Any]:
    """Alembic's differences between the database and the metadata; empty means they agree."""
    with engine.connect() as conn:
        context = MigrationContext.configure(
            conn, opts={"compare_type": True, "target_metadata": metadata, "render_as_batch": True}
        )
        return list(compare_metadata(context, metadata))


def autogenerate_revision(message: str, migrations_dir: Path = MIGRATIONS_DIR) -> Path | None:
    """Write the next revision (0002, ...) with what the metadata declares beyond head; None if nothing.

    Diffs against a scratch SQLite migrated to head, so no server is needed; the
    rendered operations are dialect-neutral (JSONB variants included).
    """
    from evolvable.store.engine import create_engine

    with tempfile.TemporaryDirectory() as scratch:
        engine = create_engine(f"sqlite:///{Path(scratch) / 'scratch.db'}")
        try:
            with _migrating(engine, migrations_dir):
                pass  # to head only: the metadata's tables beyond it are what the revision will create
            if not schema_diff(engine):
                return None
            with engine.begin() as conn:
                config = alembic_config(conn, migrations_dir)
                script = command.revision(
                    config, message=message, autogenerate=True, rev_id=_next_rev_id(migrations_dir)
                )
        finally:
            engine.dispose()
    head_revision.cache_clear()
    if script is None or isinstance(script, list):
        return None
    path = Path(script.path)
    _format(path)
    return path


def _format(path: Path) -> None:
    """Best effort: ruff-format the generated file (ruff is a dev dependency)."""
    import subprocess
    import sys

    subprocess.run([sys.executable, "-m", "ruff", "format", "-q", str(path)], check=False, capture_output=True)


def _next_rev_id(migrations_dir: Path) -> str:
    numbers = [int(p.name[:4]) for p in (migrations_dir / "versions").glob("[0-9][0-9][0-9][0-9]_*.py")]
    return f"{max(numbers, default=0) + 1:04d}"
