"""The proxy's Prometheus instrumentation: one ASGI wrapper for every request, a scrape-time collector
for the spool, writer and sessions, and the `/metrics` route.

The wrapper reads what the handlers already produce (the status line, the `x-evolvable-overhead-ms`
header, the upstream name the hot path leaves in the scope), so handlers need no metric calls.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from evolvable.proxy.records import CallRecord, CaptureRecord
from evolvable.telemetry import metrics

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Receive, Send

UPSTREAM_SCOPE_KEY = "evolvable.upstream"
"""The hot path stores the name of the upstream it called here, for the request counter's label."""

_PROTOCOLS = {
    "/v1/chat/completions": "chat",
    "/chat/completions": "chat",
    "/v1/completions": "completions",
    "/completions": "completions",
    "/v1/responses": "responses",
    "/responses": "responses",
    "/v1/messages": "messages",
    "/v1/messages/count_tokens": "messages",
    "/v1/traces": "otlp",
}


def protocol_of(path: str) -> str:
    """The wire protocol a path speaks; `api` for Evolvable's own JSON API, `ui` for the dashboard."""
    if path.startswith("/ui"):
        return "ui"
    return _PROTOCOLS.get(path, "api")


def _route_of(scope: dict[str, Any]) -> str:
    """The route template (bounded cardinality), never the raw path of an unmatched request."""
    path = scope.get("path", "")
    if path in _PROTOCOLS:
        return path if path.startswith("/v1/") else f"/v1{path}"
    route = scope.get("route")
    template = getattr(route, "path", None)
    if isinstance(template, str) and template:
        return template
    return "/ui" if path.startswith("/ui") else "unmatched"


_request_series: dict[tuple[str, str, int, str], tuple[Any, Any, Any]] = {}
_upstream_series: dict[str, tuple[Any, Any]] = {}


def _series_for(route: str, protocol: str, status: int, upstream: str) -> tuple[Any, Any, Any]:
    """The labelled children of one request kind, looked up once (a `labels()` call costs more than the
    observation). Keys are bounded: route templates x statuses x upstreams."""
    key = (route, protocol, status, upstream)
    found = _request_series.get(key)
    if found is None:
        found = _request_series[key] = (
            metrics.PROXY_REQUESTS.labels(route, protocol, str(status), upstream),
            metrics.PROXY_LATENCY.labels(route, protocol),
            metrics.PROXY_OVERHEAD.labels(route, protocol),
        )
    return found


async def observed(app: ASGIApp, scope: dict[str, Any], receive: Receive, send: Send) -> None:
    """Run `app` on one HTTP request and record its count, status, latency and added overhead."""
    started = time.perf_counter()
    seen: list[Any] = [0, None]  # status, overhead header

    def watching_send(message: Any) -> Awaitable[None]:
        # A plain function handing back `send`'s awaitable: no coroutine of its own per message.
        if message["type"] == "http.response.start":
            seen[0] = message["status"]
            for name, value in message.get("headers", ()):
                if name == b"x-evolvable-overhead-ms":
                    seen[1] = value
        return send(message)

    try:
        await app(scope, receive, watching_send)
    finally:
        path = scope.get("path", "")
        requests, latency, overhead = _series_for(
            _route_of(scope), protocol_of(path), seen[0] or 500, scope.get(UPSTREAM_SCOPE_KEY, "")
        )
        requests.inc()
        latency.observe(time.perf_counter() - started)
        overhead_ms = _as_float(seen[1])
        if overhead_ms is not None:
            overhead.observe(overhead_ms / 1000.0)


def _as_float(header: bytes | None) -> float | None:
    """The overhead header's value; None when there is none or it is not a number. (A `try` costs nothing when
    nothing is raised; `contextlib.suppress` made an object per request, 4x the CPU.)"""
    if header is None:
        return None
    try:
        return float(header)
    except ValueError:
        return None


def observe_capture(record: CaptureRecord) -> None:
    """A capture record on its way to the spool: upstream latency and time to first token of a call."""
    if not isinstance(record, CallRecord):
        return
    upstream = record.upstream or ""
    series = _upstream_series.get(upstream)
    if series is None:
        series = _upstream_series[upstream] = (
            metrics.UPSTREAM_LATENCY.labels(upstream),
            metrics.TIME_TO_FIRST_TOKEN.labels(upstream),
        )
    if record.latency_ms is not None:
        series[0].observe(record.latency_ms / 1000.0)
    if record.ttft_ms is not None:
        series[1].observe(record.ttft_ms / 1000.0)
