"""`observed` records each request's count, latency and the overhead Evolvable reports in its header: in seconds,
and nothing when the header is not a number (a malformed value must never fail the request or the metrics)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from evolvable.proxy import metrics as proxy_metrics
from evolvable.proxy.metrics import observed


class _Recorder:
    def __init__(self) -> None:
        self.values: list[float] = []

    def inc(self) -> None:
        self.values.append(1)

    def observe(self, value: float) -> None:
        self.values.append(value)


def _app(headers: list[tuple[bytes, bytes]]) -> Any:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"{}"})

    return app


@pytest.mark.parametrize(
    ("headers", "observed_overhead"),
    [
        ([(b"x-evolvable-overhead-ms", b"2.5")], [0.0025]),
        ([(b"content-type", b"application/json"), (b"x-evolvable-overhead-ms", b"0")], [0.0]),
        ([(b"x-evolvable-overhead-ms", b"n/a")], []),
        ([(b"x-evolvable-overhead-ms", b"")], []),
        ([], []),
    ],
)
def test_the_overhead_header_is_observed_in_seconds_or_not_at_all(
    headers: list[tuple[bytes, bytes]], observed_overhead: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    requests, latency, overhead = _Recorder(), _Recorder(), _Recorder()
    monkeypatch.setattr(proxy_metrics, "_series_for", lambda *_args: (requests, latency, overhead))
    sent: list[Any] = []

    async def send(message: Any) -> None:
        sent.append(message)

    async def receive() -> Any:
        return {"type": "http.disconnect"}

    scope = {"type": "http", "path": "/v1/chat/completions", "method": "POST", "headers": []}
    asyncio.run(observed(_app(headers), scope, receive, send))
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]
    assert requests.values == [1] and len(latency.values) == 1 and latency.values[0] >= 0
    assert overhead.values == observed_overhead
