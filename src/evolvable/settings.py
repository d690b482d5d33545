"""The only module that reads the environment. Everything else receives values."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path


def _home() -> Path:
    return Path(os.environ.get("EVOLVABLE_HOME", ".evolvable")).resolve()


@dataclass(frozen=True)
class Settings:
    home: Path = field(default_factory=_home)
    """Working directory for the embedded store, the spool, caches and reports."""

    db_url: str | None = field(default_factory=lambda: os.environ.get("EVOLVABLE_DB"))
    """SQLAlchemy URL; None means the embedded SQLite file under `home`."""

    model_cache: Path = field(
        default_factory=lambda: Path(
            os.environ.get("EVOLVABLE_MODEL_CACHE", str(Path.home() / ".cache" / "evolvable" / "models"))
        )
    )
    """Where converted model weights (safetensors) are cached across runs."""

    admin_key: str | None = field(default_factory=lambda: os.environ.get("EVOLVABLE_ADMIN_KEY"))

    tokenizers: str | None = field(default_factory=lambda: os.environ.get("EVOLVABLE_TOKENIZERS"))
    """`model=path,...` (`*=path` for any other model): local tokenizers governance uses to redact the token
    ids of calls whose text it redacted, instead of dropping them."""

    test_postgres_url: str = field(
        default_factory=lambda: os.environ.get(
            "EVOLVABLE_TEST_POSTGRES", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
        )
    )

    proxy_url: str = field(default_factory=lambda: os.environ.get("EVOLVABLE_PROXY_URL", "http://127.0.0.1:8400"))
    """Where `evolvable.trajectory(...)` records runs by default (the proxy's HTTP API)."""

    api_key: str | None = field(default_factory=lambda: os.environ.get("EVOLVABLE_API_KEY"))
    """The tenant key the SDK opens proxy sessions with."""

    def resolved_db_url(self) -> str:
        if self.db_url:
            return self.db_url
        self.home.mkdir(parents=True, exist_ok=True)
        return f"sqlite:///{self.home / 'evolvable.db'}"


def get_settings() -> Settings:
    return Settings()


def env_value(name: str) -> str | None:
    """A named environment variable (e.g. the upstream API key a proxy config refers to)."""
    return os.environ.get(name)
