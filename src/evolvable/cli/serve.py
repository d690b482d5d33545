"""`evolvable serve`: the data proxy in front of any OpenAI-compatible server."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from fastapi import FastAPI

    from evolvable.proxy.config import ProxyConfig
    from evolvable.store import Store


def serve(
    upstream: str | None = typer.Option(None, "--upstream", help="Base URL of an OpenAI-compatible server."),
    db: str | None = typer.Option(None, "--db", help="Database URL (default: EVOLVABLE_DB, else the embedded SQLite)."),
    host: str = typer.Option("127.0.0.1", "--host"),
    port: int = typer.Option(8400, "--port"),
    config: Path | None = typer.Option(None, "--config", help="YAML or TOML proxy config (upstreams, model aliases)."),
    spool_dir: Path | None = typer.Option(
        None, "--spool-dir", help="Capture spool directory (default: under EVOLVABLE_HOME)."
    ),
    log_level: str = typer.Option("warning", "--log-level"),
    governance: bool = typer.Option(
        True, "--governance/--no-governance", help="Redaction, tenants and keys, audit, retention (default on)."
    ),
    control: bool = typer.Option(
        True, "--control/--no-control", help="Apply registered harnesses and route policy versions (default on)."
    ),
    control_interval: float = typer.Option(
        60.0, "--control-interval", help="Seconds between control-plane cycles; 0 serves versions but never evolves."
    ),
    otlp_export: str | None = typer.Option(
        None, "--otlp-export", help="Send trajectories as they end to this OTLP/HTTP endpoint (GenAI spans)."
    ),
) -> None:
    """Run the proxy: agents point their base_url here; every call becomes an ATDP trajectory."""
    import logging

    import uvicorn

    from evolvable.proxy.app import create_app
    from evolvable.proxy.config import ConfigError, ProxyConfig, UpstreamConfig, load_config
    from evolvable.settings import env_value, get_settings
    from evolvable.store import Store

    settings = get_settings()
    cfg = load_config(config) if config is not None else ProxyConfig()
    if upstream is not None:
        cfg.upstreams.insert(0, UpstreamConfig(name="default", base_url=upstream))
        cfg.default_upstream = cfg.default_upstream or "default"
    cfg.spool_dir = spool_dir or cfg.spool_dir or settings.home / "spool"
    for up in cfg.upstreams:
        if up.api_key_env:
            up.api_key = env_value(up.api_key_env)
            if up.api_key is None:
                raise ConfigError(f"upstream {up.name!r}: environment variable {up.api_key_env} is not set")
    cfg.validate()
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    store = Store.open(db)
    routers: list = []
    governor = authenticator = rewriter = gov = plane = None
    if governance:
        from evolvable.governance import Governance

        gov = Governance.for_store(store)
        governor, authenticator, routers = gov.governor, gov.authenticator, list(gov.routers)
    if control:
        from evolvable.control.api import create_control_router
        from evolvable.control.router import HarnessRouter
        from evolvable.control.runtime import ControlPlane

        rewriter = HarnessRouter(store.engine)
        plane = ControlPlane(store, router=rewriter)
        routers.append(
            create_control_router(
                plane,
                rewriter,
                admin_key=settings.admin_key,
                tick_interval_s=control_interval or None,
                on_action=gov.audit_control_action if gov is not None else None,
            )
        )
    app = create_app(cfg, store, governor=governor, authenticator=authenticator, rewriter=rewriter, routers=routers)
    from evolvable.dashboard import install_dashboard

    install_dashboard(app, plane=plane)
    if gov is not None:
        gov.install(app)
    export_url = otlp_export or cfg.otlp_export_url
    if export_url:
        _export_continuously(app, store, cfg, export_url)
    try:
        uvicorn.run(
            app,
            host=host,
            port=port,
            loop="uvloop",
            http="httptools",
            log_level=log_level,
            access_log=False,
            proxy_headers=False,
        )
    finally:
        store.close()


def _export_continuously(app: FastAPI, store: Store, cfg: ProxyConfig, url: str) -> None:
    """OTLP out as runs end; headers come from OTEL_EXPORTER_OTLP_(TRACES_)HEADERS (read by the SDK)."""
    from evolvable.proxy.otlp_export import BackgroundExport, install_background_export, otlp_exporter

    assert cfg.spool_dir is not None  # set above, before the app was made
    checkpoint = cfg.spool_dir / "otlp_export.json"
    export = BackgroundExport(
        store,
        otlp_exporter(url),
        checkpoint,
        interval_s=cfg.otlp_export_interval_s,
        settle_s=cfg.otlp_export_settle_s,
    )
    install_background_export(app, export)


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)
