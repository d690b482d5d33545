"""`evolvable serve`: the proxy, governance and the control plane, built from one configuration.

`--config evolvable.yaml` describes everything (docs/control_plane.md); the flags override it or,
without a file, describe a one-upstream deployment.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer


def serve(
    upstream: str | None = typer.Option(None, "--upstream", help="Base URL of an OpenAI-compatible server."),
    db: str | None = typer.Option(None, "--db", help="Database URL (default: the config's, else EVOLVABLE_DB)."),
    host: str | None = typer.Option(None, "--host", help="Default: the config's, else 127.0.0.1."),
    port: int | None = typer.Option(None, "--port", help="Default: the config's, else 8400."),
    config: Path | None = typer.Option(None, "--config", help="evolvable.yaml / .toml: the whole deployment."),
    spool_dir: Path | None = typer.Option(
        None, "--spool-dir", help="Capture spool directory (default: under EVOLVABLE_HOME)."
    ),
    log_level: str | None = typer.Option(None, "--log-level"),
    governance: bool | None = typer.Option(
        None, "--governance/--no-governance", help="Redaction, tenants and keys, audit, retention (default on)."
    ),
    control: bool | None = typer.Option(
        None, "--control/--no-control", help="Apply registered harnesses and route policy versions (default on)."
    ),
    control_interval: float | None = typer.Option(
        None, "--control-interval", help="Seconds between control-plane cycles; 0 serves versions but never evolves."
    ),
    otlp_export: str | None = typer.Option(
        None, "--otlp-export", help="Send trajectories as they end to this OTLP/HTTP endpoint (GenAI spans)."
    ),
) -> None:
    """Run the proxy: agents point their base_url here; every call becomes an ATDP trajectory."""
    import logging

    import uvicorn

    from evolvable.app import build_stack
    from evolvable.proxy.slow_clients import with_read_deadline

    cfg = _configuration(config)
    overrides: dict[str, Any] = {"db": db, "host": host, "port": port, "log_level": log_level}
    overrides |= {"governance": governance, "control": control, "control_interval": control_interval}
    apply_overrides(cfg, upstream=upstream, spool_dir=spool_dir, otlp_export=otlp_export, **overrides)
    logging.basicConfig(level=cfg.server.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    with build_stack(cfg) as stack:
        assert stack.app is not None  # build_stack always builds the app
        uvicorn.run(
            stack.app,
            host=cfg.server.host,
            port=cfg.server.port,
            loop="uvloop",
            http=with_read_deadline(stack.proxy_config.request_read_timeout_s),
            log_level=cfg.server.log_level,
            access_log=False,
            proxy_headers=False,
        )


def _configuration(path: Path | None) -> Any:
    from evolvable.app import EvolvableConfig, load_config

    return load_config(path) if path is not None else EvolvableConfig()


def apply_overrides(
    cfg: Any,
    *,
    upstream: str | None = None,
    spool_dir: Path | None = None,
    db: str | None = None,
    host: str | None = None,
    port: int | None = None,
    log_level: str | None = None,
    governance: bool | None = None,
    control: bool | None = None,
    control_interval: float | None = None,
    otlp_export: str | None = None,
) -> None:
    """Command-line flags win over the file."""
    if upstream is not None:
        cfg.proxy.setdefault("upstreams", []).insert(0, {"name": "default", "base_url": upstream})
        cfg.proxy.setdefault("default_upstream", "default")
    if spool_dir is not None:
        cfg.proxy["spool_dir"] = str(spool_dir)
    if otlp_export is not None:
        cfg.proxy["otlp_export_url"] = otlp_export
    if db is not None:
        cfg.store.url = db
    for section, key, value in (
        (cfg.server, "host", host),
        (cfg.server, "port", port),
        (cfg.server, "log_level", log_level),
        (cfg.governance, "enabled", governance),
        (cfg.control, "enabled", control),
        (cfg.control, "tick_interval_s", control_interval),
    ):
        if value is not None:
            setattr(section, key, value)


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)
