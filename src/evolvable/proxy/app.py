"""The proxy application: `create_app(config, store, ...)` -> a FastAPI app.

The lifespan owns the pooled upstream client, the spool and the background writer. The two completion
endpoints are served by a pure ASGI dispatcher in front of FastAPI (no routing, validation or
middleware cost per call); everything else (sessions, trajectories, models, other components'
routers) is ordinary FastAPI.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import inspect
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import orjson
from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response

from evolvable.proxy.completions import CompletionsEndpoint
from evolvable.proxy.config import ProxyConfig
from evolvable.proxy.errors import APIError, error_body, error_response
from evolvable.proxy.hooks import (
    Authenticator,
    Governor,
    OpenAuthenticator,
    PassThroughGovernor,
    Principal,
    RequestRewriter,
)
from evolvable.proxy.limits import BodyTooLarge, ClientGone, read_body, replay
from evolvable.proxy.metrics import metrics_router, observe_capture, observed
from evolvable.proxy.sessions import Session, SessionManager
from evolvable.proxy.spool import Spool
from evolvable.proxy.upstream import UpstreamClient
from evolvable.proxy.wire import WIRE_PATHS
from evolvable.proxy.wire.endpoint import WireEndpoint
from evolvable.proxy.writer import BackgroundWriter, WriterRunner, WriterStats
from evolvable.store import Store
from evolvable.telemetry.metrics import configure_writer_snapshot

log = logging.getLogger("evolvable.proxy")


class ProxyRuntime:
    """Everything one running proxy holds. Reachable from routes as `request.app.state.proxy`."""

    def __init__(
        self,
        config: ProxyConfig,
        store: Store,
        governor: Governor | None,
        authenticator: Authenticator | None,
        rewriter: RequestRewriter | None,
    ) -> None:
        self.config = config.validate()
        self.store = store
        self.governor: Governor = governor or PassThroughGovernor()
        self.authenticator: Authenticator = authenticator or OpenAuthenticator()
        self.authenticator_is_open = authenticator is None
        self.rewriter = rewriter
        self.sessions = SessionManager(store, getattr(self.governor, "redact_identifiers", None))
        if config.spool_dir is None:
            from evolvable.settings import get_settings

            config.spool_dir = get_settings().home / "spool"
        self.spool = Spool(
            config.spool_dir,
            fsync=config.spool_fsync,
            fsync_interval_s=config.spool_fsync_interval_s,
            queue_size=config.spool_queue_size,
            segment_bytes=config.spool_segment_bytes,
            max_segment_age_s=config.spool_max_segment_age_s,
        )
        self.writer_stats = WriterStats()
        self.writer = BackgroundWriter(
            self.spool.reader,
            store,
            self.governor,
            self.sessions,
            self.writer_stats,
            batch_size=config.writer_batch_size,
            idle_s=config.writer_idle_s,
            deadletter_max_age_s=config.deadletter_max_age_s,
        )
        self.deadletter = self.writer.deadletter
        self.writer_runner = WriterRunner(self.writer, mode=config.writer_mode, nice=config.writer_nice)
        self.writer_metrics_path = config.spool_dir / "writer-metrics.prom" if config.writer_mode == "process" else None
        configure_writer_snapshot(self.writer_metrics_path)  # before the writer is forked
        self.upstream: UpstreamClient = None  # type: ignore[assignment]  # made in the lifespan (needs a loop)
        self.dropped_records = 0
        self.calls_refused = 0
        """Calls answered 503 before reaching the upstream because capture was failing (fail closed)."""

    async def authenticate(self, bearer: str | None) -> Principal | None:
        result = self.authenticator.authenticate(bearer)
        if inspect.isawaitable(result):
            result = await result
        return result

    async def minting_key_active(self, session: Session) -> bool:
        """Whether the API key that created `session` is still valid (a session key dies with it).

        Asks the authenticator's optional `key_active(key_id)` (cached there; `key_active_cached`
        answers from memory without I/O when it can)."""
        if session.minted_by is None:
            return True
        cached = getattr(self.authenticator, "key_active_cached", None)
        known = cached(session.minted_by) if cached is not None else None
        if known is not None:
            return bool(known)
        check = getattr(self.authenticator, "key_active", None)
        return True if check is None else bool(await asyncio.to_thread(check, session.minted_by))

    async def spool_record(self, record: dict[str, Any]) -> bool:
        observe_capture(record)
        return await self.spool_record_bytes(orjson.dumps(record, default=str), record.get("id"))

    async def spool_record_bytes(self, payload: bytes, record_id: Any = None) -> bool:
        """Spool a capture record; True once it is safe (in the segment file, or queued when
        `reply_after_spooled` is off). Waits under back-pressure; a record that cannot be spooled is
        counted in `records_dropped` and logged, and the caller answers by `capture_on_failure`."""
        timeout = self.config.backpressure_timeout_s
        try:
            if self.config.reply_after_spooled:
                return await self.spool.append_durable(payload, timeout)
            await self.spool.append(payload, timeout)
            return True
        except Exception:
            self.dropped_records += 1
            log.exception("capture record %s dropped", record_id)
            return False

    @property
    def fails_closed(self) -> bool:
        """Whether a call whose capture failed is answered 503 (else it is answered, and counted)."""
        return self.config.capture_on_failure == "closed"

    async def flush(self, timeout_s: float | None = None) -> bool:
        """Wait until every record queued so far is in the store (read-your-writes for the API)."""
        timeout = self.config.read_your_writes_timeout_s if timeout_s is None else timeout_s
        target = self.spool.enqueued

        def wait() -> bool:
            end = self.spool.wait_written(target, timeout)
            return end is not None and self.spool.wait_applied(end, timeout)

        return await asyncio.to_thread(wait)

    def purge_spool(self, predicate: Callable[[dict[str, Any]], bool]) -> int:
        """Remove spooled capture records matching `predicate(record)`; blocking (call in a thread).

        Records are dicts with `t` (session|call|step|signal|end), `traj` (trajectory id), `tenant`,
        `end_user`; see `records_for` for a ready-made predicate. Returns how many were removed."""

        def matches(payload: bytes) -> bool:
            try:
                return predicate(orjson.loads(payload))
            except orjson.JSONDecodeError:
                return False

        return self.spool.purge(matches) + self.deadletter.purge(matches)

    def status(self, viewer: Principal | None = None) -> dict[str, Any]:
        """Capture health. The writer's last error is shown in full to operators and to the tenant whose
        record it concerns; others see only its kind."""
        operator = viewer is None or viewer.is_operator or self.authenticator_is_open
        return {
            "spool_end": list(self.spool.end),
            "spool_checkpoint": list(self.spool.reader.load_checkpoint()),
            "spool_last_error": self.spool.last_error,
            "records_dropped": self.dropped_records + self.spool.dropped,
            "spool_failing": self.spool.failing,
            "calls_refused": self.calls_refused,
            "capture_on_failure": self.config.capture_on_failure,
            "writer_mode": self.config.writer_mode,
            "writer_alive": self.writer_runner.alive,
            "writer_restarts": self.writer_runner.restarts,
            "sessions_cached": len(self.sessions),
            "dead_letters": self.deadletter.count(),
            **self.writer_stats.as_dict(viewer.tenant_id if viewer else None, operator=operator),
        }

    async def start(self) -> None:
        await asyncio.to_thread(self._open_durable_parts)
        self.upstream = UpstreamClient(self.config.upstreams)
        # Everything loaded so far (FastAPI, pydantic, SQLAlchemy: ~10^5 objects) lives as long as the
        # process: keep it out of the cyclic GC, whose full collections otherwise show up as p99 spikes.
        gc.collect()
        gc.freeze()

    def _open_durable_parts(self) -> None:
        self.spool.open()
        recovered = self.writer.drain()  # records spooled before a crash land before new traffic
        if recovered:
            log.info("recovered %d spooled records into the store", recovered)
        self.sessions.load_running()
        self.writer_runner.start(close_in_child=(self.spool.lock_fd,) if self.spool.lock_fd is not None else ())

    async def stop(self) -> None:
        if self.upstream is not None:
            await self.upstream.close()
        await asyncio.to_thread(self._close_durable_parts)

    def _close_durable_parts(self) -> None:
        self.spool.close()  # writes what is queued
        self.writer_runner.stop()


def records_for(
    *, tenant_id: str | None = None, end_user: str | None = None, trajectory_ids: Sequence[str] | None = None
) -> Callable[[dict[str, Any]], bool]:
    """A purge predicate: records of this tenant, end user and/or these trajectories (all given must match)."""
    ids = set(trajectory_ids or ())

    def matches(rec: dict[str, Any]) -> bool:
        if tenant_id is not None and rec.get("tenant") != tenant_id:
            return False
        if end_user is not None and rec.get("end_user") != end_user:
            return False
        return not (trajectory_ids is not None and rec.get("traj") not in ids)

    return matches


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
                return await error_response(413, str(err), "invalid_request_error", "body_too_large")(
                    scope, receive, send
                )
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
    from evolvable.proxy.deadletter_routes import router as deadletter_router
    from evolvable.proxy.routes import router as proxy_router

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
    for protocol_router in _protocol_routers():
        app.include_router(protocol_router)
    app.include_router(metrics_router())
    app.include_router(deadletter_router)
    for extra in routers:
        app.include_router(extra)

    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError) -> Response:
        return Response(
            error_body(exc.message, exc.error_type, exc.code), exc.status_code, media_type="application/json"
        )

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> Response:
        reasons = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        return Response(
            error_body(f"invalid request: {reasons}", "invalid_request_error"), 400, media_type="application/json"
        )

    return app


async def _sweep_idle(runtime: ProxyRuntime) -> None:
    """Close sessions idle past the timeout as `abandoned`."""
    from evolvable.proxy.routes import end_session

    while True:
        await asyncio.sleep(runtime.config.idle_sweep_interval_s)
        try:
            for session in runtime.sessions.idle(runtime.config.session_idle_timeout_s):
                await end_session(runtime, session, "abandoned", None, reason="idle_timeout")
        except Exception:
            log.exception("idle-session sweep failed")


def _protocol_routers() -> list[APIRouter]:
    """OTLP trace ingest and the embeddings pass-through (imported late: they import this module)."""
    from evolvable.proxy.embeddings import router as embeddings
    from evolvable.proxy.otlp import router as otlp

    return [otlp, embeddings]
