"""The proxy application: `create_app(config, store, ...)` -> a FastAPI app.

The lifespan owns the pooled upstream client, the spool and the background writer. The two completion
endpoints are served by a pure ASGI dispatcher in front of FastAPI (no routing, validation or
middleware cost per call); everything else (sessions, trajectories, models, other components'
routers) is ordinary FastAPI.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

from fastapi import APIRouter, FastAPI

from evolvable.http_errors import error_response, install_error_handler
from evolvable.proxy.completions import CompletionsEndpoint
from evolvable.proxy.config import ProxyConfig
from evolvable.proxy.deadletter_routes import router as deadletter_router
from evolvable.proxy.embeddings import router as embeddings_router
from evolvable.proxy.hooks import Authenticator, Governor, RequestRewriter
from evolvable.proxy.limits import BodyTooLarge, ClientGone, read_body, replay
from evolvable.proxy.metrics import observed
from evolvable.proxy.metrics_routes import metrics_router
from evolvable.proxy.otlp import router as otlp_router
from evolvable.proxy.routes import end_session
from evolvable.proxy.routes import router as proxy_router
from evolvable.proxy.runtime import ProxyRuntime
from evolvable.proxy.wire import WIRE_PATHS
from evolvable.proxy.wire_endpoint import WireEndpoint
from evolvable.store import Store

log = logging.getLogger("evolvable.proxy")


_BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})

_HOT_PATHS = {
    "/v1/chat/completions": "chat",
    "/chat/completions": "chat",
    "/v1/completions": "completions",
    "/completions": "completions",
}


class ProxyApp(FastAPI):
    """FastAPI, except that the completion endpoints are dispatched before any routing or middleware:
    they are plain ASGI, so a call pays for none of FastAPI's machinery."""

    hot_path: CompletionsEndpoint
    wire: WireEndpoint

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await super().__call__(scope, receive, send)
        await observed(self._dispatch, scope, receive, send)

    async def _dispatch(self, scope: Any, receive: Any, send: Any) -> None:
        endpoint = _HOT_PATHS.get(scope["path"])
        if endpoint is not None:
            return await self.hot_path(scope, receive, send, endpoint)
        wire = WIRE_PATHS.get(scope["path"])
        if wire is not None:
            return await self.wire(scope, receive, send, wire)
        started = time.perf_counter()
        if scope["method"] in _BODY_METHODS:
            try:
                body = await read_body(scope, receive, self.hot_path.rt.config.max_body_bytes)
            except BodyTooLarge as err:
                return await error_response(err)(scope, receive, send)
            except ClientGone:
                return None
            receive = replay(body, receive)

        async def send_with_overhead(message: Any) -> None:
            if message["type"] == "http.response.start":
                overhead = f"{(time.perf_counter() - started) * 1000:.3f}".encode()
                message = {**message, "headers": [*message.get("headers", ()), (b"x-evolvable-overhead-ms", overhead)]}
            await send(message)

        return await super().__call__(scope, receive, send_with_overhead)


def create_app(
    config: ProxyConfig,
    store: Store,
    *,
    governor: Governor | None = None,
    authenticator: Authenticator | None = None,
    rewriter: RequestRewriter | None = None,
    routers: Sequence[APIRouter] = (),
) -> FastAPI:
    """The proxy as an ASGI app. The caller owns `store` (the app does not close it)."""
    runtime = ProxyRuntime(config, store, governor, authenticator, rewriter)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await runtime.start()
        sweeper = asyncio.create_task(_sweep_idle(runtime))
        try:
            yield
        finally:
            sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sweeper
            await runtime.stop()

    app = ProxyApp(title="Evolvable proxy", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.hot_path = CompletionsEndpoint(runtime)
    app.wire = WireEndpoint(runtime, app.hot_path)
    app.state.proxy = runtime
    app.include_router(proxy_router)
    app.include_router(otlp_router)
    app.include_router(embeddings_router)
    app.include_router(metrics_router())
    app.include_router(deadletter_router)
    for extra in routers:
        app.include_router(extra)

    install_error_handler(app)  # OpenAI's shape; the wire endpoint renders its protocols' own

    return app


async def _sweep_idle(runtime: ProxyRuntime) -> None:
    """Close sessions idle past the timeout as `abandoned`."""
    while True:
        await asyncio.sleep(runtime.config.idle_sweep_interval_s)
        try:
            for session in runtime.sessions.idle(runtime.config.session_idle_timeout_s):
                await end_session(runtime, session, "abandoned", None, reason="idle_timeout")
        except Exception:
            log.exception("idle-session sweep failed")
