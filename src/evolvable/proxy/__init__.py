"""The data proxy: OpenAI-compatible capture of live agent traffic into ATDP trajectories.

    from evolvable.proxy import ProxyConfig, create_app
    app = create_app(ProxyConfig.for_upstream("http://127.0.0.1:8000/v1"), store)

Seams for other components are in `evolvable.proxy.hooks`; see docs/proxy.md.
"""

from evolvable.proxy.app import create_app
from evolvable.proxy.config import ConfigError, ModelAlias, ProxyConfig, TokenCapture, UpstreamConfig, load_config
from evolvable.proxy.hooks import (
    Authenticator,
    Governor,
    Principal,
    RequestRewriter,
    RewriteResult,
    SessionContext,
)
from evolvable.proxy.runtime import ProxyRuntime, records_for

__all__ = [
    "Authenticator",
    "ConfigError",
    "Governor",
    "ModelAlias",
    "Principal",
    "ProxyConfig",
    "ProxyRuntime",
    "RequestRewriter",
    "RewriteResult",
    "SessionContext",
    "TokenCapture",
    "UpstreamConfig",
    "create_app",
    "load_config",
    "records_for",
]
