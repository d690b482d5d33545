"""`build_stack(config)`: the whole deployment from one configuration, in one place.

    policy servers (launched if embedded) -> proxy config (their upstreams added)
    store -> governance (keys, redaction, audit, retention) -> harness router
    control planes (one per tenant, one leader) with each agent's workload
    the proxy app with the governance and control routers mounted

`evolvable serve` runs `stack.app` under uvicorn; `evolvable demo` runs it in a thread and drives
`stack.planes.tick()` between rounds; `evolvable control tick` builds only what a tick needs
(`build_control_only`).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from evolvable.app.config import EvolvableConfig
from evolvable.app.control import build_planes
from evolvable.app.endpoints import hot_load_targets, launch_policy_servers, proxy_config, secret
from evolvable.control.tenancy import ControlPlanes
from evolvable.proxy.config import ProxyConfig
from evolvable.settings import get_settings
from evolvable.store import Store

if TYPE_CHECKING:
    from fastapi import APIRouter, FastAPI

    from evolvable.control.router import HarnessRouter
    from evolvable.governance import Governance
    from evolvable.governance.redaction.tokenizer_registry import TokenizerRegistry
    from evolvable.protocol.harness import LiveValues
    from evolvable.proxy.hooks import Authenticator


@dataclass
class Stack:
    config: EvolvableConfig
    store: Store
    proxy_config: ProxyConfig
    app: FastAPI | None = None
    governance: Governance | None = None
    router: HarnessRouter | None = None
    planes: ControlPlanes | None = None
    policy_endpoints: dict[str, str] = field(default_factory=dict)
    resources: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)

    def close(self) -> None:
        self.resources.close()

    def __enter__(self) -> Stack:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _tokenizers(config: EvolvableConfig) -> TokenizerRegistry | None:
    """Local tokenizers for redacting token ids: the configured ones, else the embedded servers' model."""
    from evolvable.governance.redaction.tokenizer_registry import TokenizerRegistry

    if config.governance.tokenizers:
        return TokenizerRegistry(dict(config.governance.tokenizers))
    embedded = [s for s in config.policy_servers if s.kind == "embedded"]
    if embedded:
        from evolvable.model_loading import cached_model_dir

        model = embedded[0].model
        return TokenizerRegistry({model: cached_model_dir(model)}, fallback=model)
    return None


def _governance(config: EvolvableConfig, store: Store, policy_endpoints: dict[str, str]) -> Governance:
    from evolvable.control.erasure import control_erasers
    from evolvable.governance import Governance

    g = config.governance
    admin_key = secret(g.admin_key_env, "governance.admin_key_env") if g.admin_key_env else get_settings().admin_key
    return Governance.for_store(
        store,
        require_keys=g.require_keys,
        person_names=g.person_names,
        retention_interval_s=g.retention_interval_s,
        admin_key=admin_key,
        tokenizers=_tokenizers(config),
        erasers=control_erasers(
            store.engine,
            config.control.weights.erasure,
            hot_load_targets(config.policy_servers, policy_endpoints),
        ),
    )


def _open(config: EvolvableConfig, log_dir: Path | None = None) -> Stack:
    from evolvable.store import Store

    resources = contextlib.ExitStack()
    try:
        endpoints = launch_policy_servers(config, resources, log_dir or get_settings().home / "logs")
        proxy = proxy_config(config, endpoints)
        store = Store.open(config.store.url)
        resources.callback(store.close)
    except BaseException:
        resources.close()
        raise
    return Stack(config=config, store=store, proxy_config=proxy, policy_endpoints=endpoints, resources=resources)


def build_stack(config: EvolvableConfig, *, log_dir: Path | None = None) -> Stack:
    """Everything `serve` runs. Close the stack (or use it as a context manager) to stop what it started.
    Launched policy servers log under `log_dir` (default: EVOLVABLE_HOME/logs)."""
    from evolvable.control.api import create_control_router
    from evolvable.control.router import HarnessRouter
    from evolvable.proxy.app import create_app

    stack = _open(config, log_dir=log_dir)
    try:
        routers: list[APIRouter] = []
        governor = authenticator = None
        if config.governance.enabled:
            governance = stack.governance = _governance(config, stack.store, stack.policy_endpoints)
            governor, authenticator = governance.governor, governance.authenticator
            routers += governance.routers
        if config.control.enabled:
            router = stack.router = HarnessRouter(stack.store.engine, live_values=_live_values(config))
            planes = stack.planes = _planes(stack, router=router)
            routers.append(
                create_control_router(
                    planes,
                    router,
                    authenticator=_key_directory(stack),
                    tick_interval_s=config.control.tick_interval_s or None,
                    on_action=stack.governance.audit_control_action if stack.governance is not None else None,
                )
            )
        app = stack.app = create_app(
            stack.proxy_config,
            stack.store,
            governor=governor,
            authenticator=authenticator,
            rewriter=stack.router,
            routers=routers,
        )
        from evolvable.dashboard import install_dashboard

        install_dashboard(app, plane=stack.planes)
        if stack.governance is not None:
            stack.governance.install(app)
        if stack.proxy_config.otlp_export_url:
            _export_continuously(stack, app)
    except BaseException:
        stack.close()
        raise
    return stack


def _live_values(config: EvolvableConfig) -> LiveValues:
    """Exemplars served with the live conversation's own values in place of their placeholders, found by the
    recognizers governance redacts with (client-mode workload agents use the same default recognizers)."""
    from evolvable.governance.redaction import live_values_function

    return live_values_function(person_names=config.governance.person_names)


def _export_continuously(stack: Stack, app: FastAPI) -> None:
    """OTLP out as runs end; headers come from OTEL_EXPORTER_OTLP_(TRACES_)HEADERS (read by the SDK)."""
    from evolvable.proxy.otlp_export import BackgroundExport, install_background_export, otlp_exporter

    cfg = stack.proxy_config
    assert cfg.spool_dir is not None and cfg.otlp_export_url is not None  # proxy_config() sets the spool
    export = BackgroundExport(
        stack.store,
        otlp_exporter(cfg.otlp_export_url),
        cfg.spool_dir / "otlp_export.json",
        interval_s=cfg.otlp_export_interval_s,
        settle_s=cfg.otlp_export_settle_s,
    )
    install_background_export(app, export)


def build_control_only(config: EvolvableConfig) -> Stack:
    """The store and the control planes, no proxy (`evolvable control tick`). An embedded policy server
    the file gives no URL for is launched for the tick's replays, as `serve` would."""
    stack = _open(config)
    try:
        stack.planes = _planes(stack, router=None)
    except BaseException:
        stack.close()
        raise
    return stack


def _planes(stack: Stack, *, router: HarnessRouter | None) -> ControlPlanes:
    sanitize = None
    if stack.config.governance.enabled:
        from evolvable.app.redaction import exemplar_redactor

        sanitize = exemplar_redactor()
    return build_planes(
        stack.config,
        stack.store,
        stack.proxy_config,
        router=router,
        policy_endpoints=stack.policy_endpoints,
        sanitize=sanitize,
    )


def _key_directory(stack: Stack) -> Authenticator:
    """The control API always authenticates by key, with or without the rest of governance."""
    if stack.governance is not None:
        return stack.governance.directory
    from evolvable.governance.tenants import TenantDirectory

    return TenantDirectory.from_store(stack.store)
