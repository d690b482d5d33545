"""`GET /metrics` and the scrape-time collector of one proxy's spool, writer and sessions."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from evolvable.proxy.runtime import ProxyRuntime
from evolvable.proxy.spool import segment_path
from evolvable.telemetry import metrics


def spool_backlog_bytes(directory: Path, end: tuple[int, int], checkpoint: tuple[int, int]) -> int:
    """Bytes written to the spool's files that the writer has not applied to the store yet."""
    (end_seq, end_off), (seq, off) = end, checkpoint
    if (seq, off) >= (end_seq, end_off):
        return 0
    if seq == end_seq:
        return end_off - off
    total = 0
    for s in range(seq, end_seq):
        try:
            size = os.stat(segment_path(directory, s)).st_size
        except FileNotFoundError:
            continue
        total += max(0, size - off) if s == seq else size
    return total + end_off


class ProxyCollector(Collector):
    """Scrape-time state of one proxy: spool, writer (counters shared with its process), sessions."""

    def __init__(self, runtime: ProxyRuntime) -> None:
        self.rt = runtime

    def collect(self) -> Iterator[Any]:
        rt = self.rt
        status = rt.status()
        checkpoint = tuple(status["spool_checkpoint"])
        backlog = spool_backlog_bytes(rt.spool.directory, tuple(status["spool_end"]), checkpoint)
        yield GaugeMetricFamily("evolvable_spool_backlog_bytes", "Spooled bytes not yet applied to the store.", backlog)
        yield CounterMetricFamily(
            "evolvable_spool_records", "Capture records queued on the spool by this process.", rt.spool.enqueued
        )
        yield GaugeMetricFamily(
            "evolvable_writer_lag_seconds",
            "0 when the store has everything spooled; else seconds since the writer last committed a batch.",
            _writer_lag(rt.spool.directory, backlog),
        )
        yield GaugeMetricFamily(
            "evolvable_writer_alive", "1 while the background writer runs.", int(status["writer_alive"])
        )
        yield CounterMetricFamily(
            "evolvable_writer_records", "Spool records applied to the store.", status["records_applied"]
        )
        yield CounterMetricFamily(
            "evolvable_writer_events", "ATDP events applied to the store.", status["events_applied"]
        )
        yield CounterMetricFamily(
            "evolvable_writer_failures", "Writer cycles that failed and were retried.", status["writer_failures"]
        )
        yield CounterMetricFamily(
            "evolvable_proxy_records_dropped",
            "Capture records dropped after the back-pressure timeout (data lost; should stay 0).",
            status["records_dropped"],
        )
        yield GaugeMetricFamily("evolvable_proxy_sessions_open", "Sessions running on this proxy.", len(rt.sessions))


def _writer_lag(directory: Path, backlog: int) -> float:
    if backlog <= 0:
        return 0.0
    try:
        return max(0.0, time.time() - os.stat(directory / "checkpoint").st_mtime)
    except FileNotFoundError:
        return 0.0


def metrics_router(extra: Iterable[Collector] = ()) -> APIRouter:
    """`GET /metrics`: process metrics, this proxy's state, the writer's counters, and `extra` collectors
    (e.g. the control plane's), in Prometheus text format."""
    router = APIRouter()

    @router.get("/metrics", include_in_schema=False)
    async def scrape(request: Request) -> Response:
        rt: ProxyRuntime = request.app.state.proxy
        collectors = [ProxyCollector(rt), *extra, *getattr(request.app.state, "metrics_collectors", ())]
        body = metrics.exposition(
            [metrics.PROXY_REGISTRY], collectors, writer=True, writer_snapshot=rt.writer_metrics_path
        )
        return Response(body, media_type=metrics.CONTENT_TYPE)

    return router
