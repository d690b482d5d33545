"""Proxy configuration: upstreams, model aliases, sessions, spool. Loaded from YAML or TOML.

Secrets never live in the file: an upstream names the environment variable that holds its key,
and `evolvable serve` resolves it through `evolvable.settings` (the one place that reads the environment).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from evolvable.config_file import read_config_file
from evolvable.errors import EvolvableError


class ConfigError(EvolvableError):
    """The proxy configuration is invalid."""


WIRE_PROTOCOLS = ("chat", "responses", "messages")


class TokenCapture(StrEnum):
    """Whether the proxy asks the upstream for engine token ids and logprobs (vLLM field names)."""

    auto = "auto"  # ask; if the upstream rejects the fields with a 400, retry once without and remember
    always = "always"
    never = "never"


@dataclass
class UpstreamConfig:
    name: str
    base_url: str
    api_key_env: str | None = None
    api_key: str | None = None
    """Resolved from `api_key_env` at startup; never read from the file."""
    token_capture: TokenCapture = TokenCapture.auto
    timeout_s: float = 600.0
    connect_timeout_s: float = 10.0
    protocols: tuple[str, ...] = ("chat",)
    """Wire protocols the upstream serves natively (`chat`, `responses`, `messages`); a request in another
    protocol is translated to chat completions (see docs/proxy.md, Wire protocols)."""

    def url(self, path: str) -> str:
        """`path` starts with /v1/...; base_url may or may not end with /v1."""
        base = self.base_url.rstrip("/")
        if base.endswith("/v1") and path.startswith("/v1/"):
            return base + path[3:]
        return base + path


@dataclass
class ModelAlias:
    upstream: str
    served_model: str | None = None
    """The model name sent upstream; None keeps the client's name."""


@dataclass
class ProxyConfig:
    upstreams: list[UpstreamConfig] = field(default_factory=list)
    models: dict[str, ModelAlias] = field(default_factory=dict)
    default_upstream: str | None = None
    session_idle_timeout_s: float = 1800.0
    idle_sweep_interval_s: float = 5.0
    spool_dir: Path | None = None
    """None: `spool/` under the Evolvable home directory (EVOLVABLE_HOME)."""
    spool_fsync: str = "interval"
    """`interval` (default): fdatasync at most every `spool_fsync_interval_s` (and when a segment closes);
    `batch`: group commit, one fdatasync per write batch; `none`: leave it to the OS. All three survive
    kill -9 (the page cache outlives the process); they differ only on power loss."""
    spool_fsync_interval_s: float = 0.05
    spool_queue_size: int = 4096
    spool_segment_bytes: int = 16 * 1024 * 1024
    spool_max_segment_age_s: float = 5.0
    """A segment closes at this age too, so raw (unredacted) records leave the disk within about this
    time plus the writer's lag, also under steady traffic."""
    reply_after_spooled: bool = True
    """Answer a call only once its capture record is in the spool file (survives kill -9 of the proxy):
    every answered call is captured. Off: answer first, spool after (a kill can lose the last records)."""
    capture_on_failure: str = "closed"
    """When a record cannot be spooled (disk full, read-only, I/O error): `closed` answers 503
    `capture_unavailable`; `open` answers the call anyway. Both count the record in `records_dropped`."""
    backpressure_timeout_s: float = 30.0
    writer_mode: str = "process"
    """`process`: the background writer runs in a forked, lower-priority process (default; capture work
    never competes with requests for the GIL); `thread`: inside the proxy process."""
    writer_nice: int = 10
    writer_batch_size: int = 256
    writer_idle_s: float = 0.25
    """How long the writer lets a trickle of records gather before a batch (a backlog is applied at once).
    Each wake-up of the writer seemed to delay one or two calls by milliseconds on a machine whose cores it
    shares: at c=1, 0.05 s gave about twice the added p99 of 0.25 s (docs/PERFORMANCE.md, Session 7); 1.0 s
    was no better than 0.25 in steady state (Session 10). A call is in the store within about this time plus
    the batch's own; a read that needs it sooner (the API's read-your-writes, shutdown) wakes the writer."""
    deadletter_max_age_s: float = 7 * 24 * 3600.0
    """Quarantined records (raw, unredacted) not replayed or discarded within this age are deleted, counted
    and logged by the writer."""
    max_body_bytes: int = 16 * 1024 * 1024
    """Largest request body accepted on any endpoint (413 past it, refused while reading)."""
    max_upstream_reply_bytes: int = 64 * 1024 * 1024
    """Largest upstream reply read (502 `upstream_reply_too_large` past it, recorded as an error step)."""
    read_your_writes_timeout_s: float = 5.0
    otlp_export_url: str | None = None
    """Send trajectories to this OTLP/HTTP endpoint as they end (`evolvable serve`; docs/proxy.md, OTLP out)."""
    otlp_export_interval_s: float = 30.0
    otlp_export_settle_s: float = 10.0
    """A run is sent once it ended this long ago (the writer has stored it by then)."""
    request_read_timeout_s: float = 30.0
    """A client must send a request's headers and body within this time, else the connection is closed
    (408): slow clients cannot hold connections open forever (`evolvable serve`)."""

    def upstream(self, name: str | None) -> UpstreamConfig:
        wanted = name or self.default_upstream or (self.upstreams[0].name if self.upstreams else None)
        for up in self.upstreams:
            if up.name == wanted:
                return up
        raise ConfigError(f"unknown upstream {wanted!r}; configured: {[u.name for u in self.upstreams]}")

    def validate(self) -> ProxyConfig:
        if not self.upstreams:
            raise ConfigError("no upstream configured: pass --upstream URL or name one in the config file")
        names = [u.name for u in self.upstreams]
        if len(names) != len(set(names)):
            raise ConfigError(f"upstream names must be unique: {names}")
        for up in self.upstreams:
            unknown = [p for p in up.protocols if p not in WIRE_PROTOCOLS]
            if unknown or not up.protocols:
                raise ConfigError(f"upstream {up.name!r}: protocols must be a non-empty subset of {WIRE_PROTOCOLS}")
        for alias, target in self.models.items():
            if target.upstream not in names:
                raise ConfigError(f"model alias {alias!r} points to unknown upstream {target.upstream!r}")
        if self.default_upstream is not None and self.default_upstream not in names:
            raise ConfigError(f"default_upstream {self.default_upstream!r} is not a configured upstream")
        if self.spool_fsync not in ("batch", "interval", "none"):
            raise ConfigError(f"spool_fsync must be batch, interval or none, not {self.spool_fsync!r}")
        if self.capture_on_failure not in ("closed", "open"):
            raise ConfigError(f"capture_on_failure must be closed or open, not {self.capture_on_failure!r}")
        if self.spool_max_segment_age_s <= 0:
            raise ConfigError("spool_max_segment_age_s must be positive")
        if self.deadletter_max_age_s <= 0:
            raise ConfigError("deadletter_max_age_s must be positive")
        if self.writer_mode not in ("process", "thread"):
            raise ConfigError(f"writer_mode must be process or thread, not {self.writer_mode!r}")
        if min(self.max_body_bytes, self.spool_queue_size, self.max_upstream_reply_bytes) <= 0:
            raise ConfigError("max_body_bytes, max_upstream_reply_bytes and spool_queue_size must be positive")
        return self

    @classmethod
    def for_upstream(cls, base_url: str, **kwargs: Any) -> ProxyConfig:
        """The one-upstream config `evolvable serve --upstream URL` uses."""
        return cls(upstreams=[UpstreamConfig(name="default", base_url=base_url)], **kwargs).validate()


_SCALAR_KEYS = {
    "default_upstream": str,
    "session_idle_timeout_s": float,
    "idle_sweep_interval_s": float,
    "spool_fsync": str,
    "spool_fsync_interval_s": float,
    "spool_queue_size": int,
    "spool_segment_bytes": int,
    "spool_max_segment_age_s": float,
    "reply_after_spooled": bool,
    "capture_on_failure": str,
    "backpressure_timeout_s": float,
    "writer_mode": str,
    "writer_nice": int,
    "writer_batch_size": int,
    "writer_idle_s": float,
    "deadletter_max_age_s": float,
    "max_body_bytes": int,
    "max_upstream_reply_bytes": int,
    "read_your_writes_timeout_s": float,
    "otlp_export_url": str,
    "otlp_export_interval_s": float,
    "otlp_export_settle_s": float,
    "request_read_timeout_s": float,
}


def config_from_dict(data: dict[str, Any]) -> ProxyConfig:
    """Build a config from parsed YAML/TOML. Unknown keys are errors (typos must not vanish)."""
    data = dict(data)
    cfg = ProxyConfig()
    try:
        for raw in data.pop("upstreams", []) or []:
            raw = dict(raw)
            up = UpstreamConfig(
                name=str(raw.pop("name")),
                base_url=str(raw.pop("base_url")),
                api_key_env=raw.pop("api_key_env", None),
                token_capture=TokenCapture(raw.pop("token_capture", "auto")),
                timeout_s=float(raw.pop("timeout_s", raw.pop("timeout", 600.0))),
                connect_timeout_s=float(raw.pop("connect_timeout_s", 10.0)),
                protocols=tuple(str(p) for p in raw.pop("protocols", ("chat",))),
            )
            if raw:
                raise ConfigError(f"unknown keys in upstream {up.name!r}: {sorted(raw)}")
            cfg.upstreams.append(up)
        for alias, target in (data.pop("models", {}) or {}).items():
            if isinstance(target, str):
                cfg.models[alias] = ModelAlias(upstream=target)
            else:
                target = dict(target)
                upstream, served = str(target.pop("upstream")), target.pop("model", None)
                cfg.models[alias] = ModelAlias(upstream=upstream, served_model=served)
                if target:
                    raise ConfigError(f"unknown keys in model alias {alias!r}: {sorted(target)}")
        if "spool_dir" in data:
            cfg.spool_dir = Path(data.pop("spool_dir"))
        for key, cast in _SCALAR_KEYS.items():
            if key in data:
                setattr(cfg, key, cast(data.pop(key)))
    except (KeyError, TypeError, ValueError) as err:
        raise ConfigError(f"invalid proxy config: {err!r}") from None
    if data:
        raise ConfigError(f"unknown keys in proxy config: {sorted(data)}")
    return cfg


def load_config(path: Path) -> ProxyConfig:
    """Read a YAML (.yaml/.yml) or TOML (.toml) config file. Not validated yet (the CLI may add an upstream)."""
    data = read_config_file(path, ConfigError)
    if not isinstance(data, dict):
        raise ConfigError(f"config {path} must be a mapping at the top level")
    if "proxy" in data and isinstance(data["proxy"], dict):
        data = data["proxy"]
    return config_from_dict(data)
