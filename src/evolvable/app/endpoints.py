"""Resolve the configuration's names into addresses: upstreams, policy servers, model endpoints, secrets."""

from __future__ import annotations

import contextlib
from pathlib import Path

from evolvable.app.config import ConfigError, EvolvableConfig, ModelEndpointSection, PolicyServerSection
from evolvable.proxy.config import ProxyConfig, UpstreamConfig, config_from_dict
from evolvable.settings import env_value, get_settings


def v1(url: str) -> str:
    """An OpenAI base URL ending in /v1 (what the openai client and the replay runners expect)."""
    base = url.rstrip("/")
    return base if base.endswith("/v1") else base + "/v1"


def secret(env_name: str | None, where: str) -> str | None:
    if env_name is None:
        return None
    value = env_value(env_name)
    if value is None:
        raise ConfigError(f"{where}: environment variable {env_name} is not set")
    return value


def launch_policy_servers(config: EvolvableConfig, resources: contextlib.ExitStack, log_dir: Path) -> dict[str, str]:
    """Every policy server's /v1 URL by name; embedded servers without a URL are started here (and stopped
    with `resources`)."""
    endpoints: dict[str, str] = {}
    for server in config.policy_servers:
        if server.url:
            endpoints[server.name] = v1(server.url)
            continue
        from evolvable.policy_server.launcher import policy_server

        log_dir.mkdir(parents=True, exist_ok=True)
        endpoints[server.name] = resources.enter_context(
            policy_server(
                server.model,
                log_dir / f"policy_server_{server.name}.log",
                max_batch=server.max_batch,
                extra_args=("--device", server.device, "--dtype", server.dtype),
            )
        )
    return endpoints


def proxy_config(config: EvolvableConfig, policy_endpoints: dict[str, str]) -> ProxyConfig:
    """The proxy's own config from the `proxy` section; each policy server is an upstream too (by its name)."""
    from evolvable.proxy.config import ConfigError as ProxyConfigError

    try:
        cfg = config_from_dict(config.proxy)
        known = {u.name for u in cfg.upstreams}
        for name, url in policy_endpoints.items():
            if name not in known:
                cfg.upstreams.append(UpstreamConfig(name=name, base_url=url))
        cfg.default_upstream = cfg.default_upstream or (cfg.upstreams[0].name if cfg.upstreams else None)
        cfg.spool_dir = cfg.spool_dir or get_settings().home / "spool"
        for up in cfg.upstreams:
            up.api_key = secret(up.api_key_env, f"proxy.upstreams.{up.name}.api_key_env")
        return cfg.validate()
    except ProxyConfigError as err:
        raise ConfigError(f"proxy: {err}") from None


def upstream_url(proxy: ProxyConfig, name: str | None) -> tuple[str, str | None]:
    """(/v1 base URL, API key) of a proxy upstream; None names the default one."""
    up = proxy.upstream(name)
    return v1(up.base_url), up.api_key


def model_endpoint(section: ModelEndpointSection, proxy: ProxyConfig, where: str) -> tuple[str, str]:
    """(/v1 base URL, API key) of an evolver or judge model."""
    if section.upstream is not None:
        url, key = upstream_url(proxy, section.upstream)
        return url, secret(section.api_key_env, where) or key or "not-needed"
    assert section.base_url is not None
    return v1(section.base_url), secret(section.api_key_env, where) or "not-needed"


def hot_load_targets(servers: list[PolicyServerSection], endpoints: dict[str, str]) -> tuple[str, ...]:
    """Base URLs (without /v1) of the servers a trained adapter must be loaded into."""
    return tuple(endpoints[s.name].removesuffix("/v1") for s in servers)
