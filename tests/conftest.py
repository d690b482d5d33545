"""Shared fixtures. Every store-backed test runs on SQLite and on the real PostgreSQL server.

PostgreSQL tests use a throw-away database per test session (created and
dropped here), so parallel runs on one server never see each other's rows.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Idle OpenMP threads must sleep, not spin: with several torch processes on 2 cores, spinning
# made generation ~30x slower (docs/policy_server.md). Must be set before torch is imported.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

POSTGRES_ADMIN_URL = os.environ.get("EVOLVABLE_TEST_POSTGRES", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


def _postgres_available() -> bool:
    import sqlalchemy as sa

    try:
        engine = sa.create_engine(POSTGRES_ADMIN_URL)
        with engine.connect() as conn:
            conn.execute(sa.text("select 1"))
        engine.dispose()
        return True
    except Exception:
        return False


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A fresh PostgreSQL database for this test session. Fails (never skips) without a server,
    unless EVOLVABLE_SKIP_POSTGRES=1 is set explicitly for local runs."""
    import sqlalchemy as sa

    if not _postgres_available():
        if os.environ.get("EVOLVABLE_SKIP_POSTGRES") == "1":
            pytest.skip("PostgreSQL not reachable and EVOLVABLE_SKIP_POSTGRES=1")
        pytest.fail(f"PostgreSQL is not reachable at {POSTGRES_ADMIN_URL}; start it or set EVOLVABLE_TEST_POSTGRES")
    name = f"evolvable_test_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(POSTGRES_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = POSTGRES_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    try:
        yield url
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database URL for an empty store: a new SQLite file, or a fresh schema in the session's
    PostgreSQL database. Tests that take this fixture run once per backend."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'store.db'}"
        return
    import sqlalchemy as sa

    base = request.getfixturevalue("postgres_url")
    # One database per test: cheap on PostgreSQL (template copy) and fully isolated.
    name = f"t_{uuid.uuid4().hex[:16]}"
    admin = sa.create_engine(base, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = base.rsplit("/", 1)[0] + f"/{name}"
    try:
        yield url
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
