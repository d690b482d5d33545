"""`evolvable serve`: the data proxy in front of any OpenAI-compatible server."""

from __future__ import annotations

from pathlib import Path

import typer


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
) -> None:
    """Run the proxy: agents point their base_url here; every call becomes an ATDP trajectory."""
    import logging

    import uvicorn

    from evolvable.proxy.app import create_app
    from evolvable.proxy.config import ConfigError, ProxyConfig, UpstreamConfig, load_config
    from evolvable.proxy.slow_clients import with_read_deadline
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
    governor = authenticator = rewriter = gov = None
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
                plane, rewriter, admin_key=settings.admin_key, tick_interval_s=control_interval or None
            )
        )
    app = create_app(cfg, store, governor=governor, authenticator=authenticator, rewriter=rewriter, routers=routers)
    if gov is not None:
        gov.install(app)
    try:
        uvicorn.run(
            app,
            host=host,
            port=port,
            loop="uvloop",
            http=with_read_deadline(cfg.request_read_timeout_s),
            log_level=log_level,
            access_log=False,
            proxy_headers=False,
        )
    finally:
        store.close()


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)
