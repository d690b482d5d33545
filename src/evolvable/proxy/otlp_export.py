"""OTLP out: stored trajectories as GenAI spans, sent with the OpenTelemetry SDK's OTLP/HTTP exporter.

The span shapes are `protocol.converters.otel.to_otel`'s (GenAI conventions plus `evolvable.*` for a
lossless round trip); here they become SDK `ReadableSpan`s, so the SDK's exporter does the encoding,
compression and retries, and Evolvable's data shows in whatever tracing backend a team runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from datetime import UTC, datetime, timedelta
from itertools import islice
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from fastapi import FastAPI
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from evolvable.errors import EvolvableError
from evolvable.protocol.converters.otel import _unattrs, to_otel
from evolvable.protocol.models import Trajectory
from evolvable.store import Store

log = logging.getLogger("evolvable.proxy.otlp_export")
TRACES_PATH = "/v1/traces"


class ExportFailed(EvolvableError):
    """The OTLP endpoint did not take a batch (after the SDK exporter's own retries)."""


def traces_endpoint(url: str) -> str:
    """`http://host:4318` (a collector's base URL) -> `.../v1/traces`; a URL with a path is kept as is."""
    return url.rstrip("/") + TRACES_PATH if urlsplit(url).path in ("", "/") else url


def otlp_exporter(url: str, headers: Mapping[str, str] | None = None, timeout_s: float = 10.0) -> OTLPSpanExporter:
    return OTLPSpanExporter(
        endpoint=traces_endpoint(url), headers=dict(headers or {}), timeout=timeout_s, compression=Compression.Gzip
    )


def readable_spans(trajectories: Iterable[Trajectory], *, service_name: str = "evolvable") -> list[ReadableSpan]:
    """The trajectories as SDK spans (one trace each), ready for any SpanExporter."""
    doc = to_otel(trajectories, service_name=service_name)
    out: list[ReadableSpan] = []
    for rs in doc["resourceSpans"]:
        resource = Resource.create(_unattrs(rs["resource"]["attributes"]))
        for ss in rs["scopeSpans"]:
            scope = InstrumentationScope(ss["scope"]["name"], ss["scope"].get("version"))
            out += [_readable(span, resource, scope) for span in ss["spans"]]
    return out


def _context(trace_id: str, span_id: str) -> SpanContext:
    return SpanContext(int(trace_id, 16), int(span_id, 16), is_remote=False, trace_flags=TraceFlags(TraceFlags.SAMPLED))


def _readable(span: dict[str, Any], resource: Resource, scope: InstrumentationScope) -> ReadableSpan:
    status = span.get("status") or {}
    return ReadableSpan(
        name=span["name"],
        context=_context(span["traceId"], span["spanId"]),
        parent=_context(span["traceId"], span["parentSpanId"]) if span.get("parentSpanId") else None,
        resource=resource,
        attributes=_unattrs(span["attributes"]),
        events=[
            Event(e["name"], _unattrs(e.get("attributes")), int(e["timeUnixNano"])) for e in span.get("events", [])
        ],
        kind=SpanKind(int(span["kind"]) - 1),  # OTLP counts from UNSPECIFIED = 0; the SDK from INTERNAL = 0
        status=Status(StatusCode.ERROR, status.get("message")) if status.get("code") == 2 else Status(StatusCode.UNSET),
        start_time=int(span["startTimeUnixNano"]),
        end_time=int(span["endTimeUnixNano"]),
        instrumentation_scope=scope,
    )


def export_trajectories(
    trajectories: Iterable[Trajectory],
    exporter: SpanExporter,
    *,
    service_name: str = "evolvable",
    trajectories_per_request: int = 20,
) -> tuple[int, int]:
    """Send the trajectories, a few per request; returns (trajectories, spans) sent. Raises ExportFailed."""
    sent_trajectories = sent_spans = 0
    for chunk in _chunks(trajectories, trajectories_per_request):
        spans = readable_spans(chunk, service_name=service_name)
        if exporter.export(spans) != SpanExportResult.SUCCESS:
            raise ExportFailed(
                f"the OTLP endpoint refused a batch of {len(chunk)} trajectories "
                f"after {sent_trajectories} were sent (see the log for the endpoint's answer)"
            )
        sent_trajectories += len(chunk)
        sent_spans += len(spans)
    return sent_trajectories, sent_spans


def _chunks(items: Iterable[Trajectory], size: int) -> Iterator[list[Trajectory]]:
    it = iter(items)
    while chunk := list(islice(it, size)):
        yield chunk


# --------------------------------------------------------------------------- continuous export (evolvable serve)


class BackgroundExport:
    """Sends trajectories to an OTLP endpoint as they end, from a checkpoint that survives restarts.

    The checkpoint (a small JSON file) holds the `ended_at` reached and the ids already sent at that
    instant, so ties are neither skipped nor sent twice. A first start begins at that moment; older runs
    are a one-off `evolvable trajectories export --otlp`. A run is sent once it ended `settle_s` ago (the
    writer has stored it by then); a run whose end is stored later than that (a long spool backlog, an
    OTLP-received trace with an old root span) falls behind the checkpoint and is not sent. Signals that
    arrive after a run was sent are not re-sent. A failed export is retried at the next interval; the
    checkpoint moves only after success.
    """

    def __init__(
        self,
        store: Store,
        exporter: SpanExporter,
        checkpoint: Path,
        *,
        interval_s: float = 30.0,
        batch_size: int = 100,
        settle_s: float = 10.0,
        service_name: str = "evolvable",
    ) -> None:
        self.store, self.exporter, self.checkpoint = store, exporter, checkpoint
        self.interval_s, self.batch_size, self.service_name = interval_s, batch_size, service_name
        self.settle_s = settle_s

    def _load(self) -> tuple[datetime, set[str]]:
        try:
            state = json.loads(self.checkpoint.read_text())
            return datetime.fromisoformat(state["ended_at"]), set(state["ids"])
        except FileNotFoundError:
            now = datetime.now(UTC)
            self._save(now, set())
            return now, set()

    def _save(self, ended_at: datetime, ids: set[str]) -> None:
        self.checkpoint.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.checkpoint.with_suffix(".tmp")
        tmp.write_text(json.dumps({"ended_at": ended_at.isoformat(), "ids": sorted(ids)}))
        os.replace(tmp, self.checkpoint)

    def _ended_since(self, since: datetime, sent: set[str]) -> list[tuple[str, datetime]]:
        settled = datetime.now(UTC) - timedelta(seconds=self.settle_s)
        rows = self.store.ended_between(since, settled, self.batch_size + len(sent))
        return [r for r in rows if r[0] not in sent][: self.batch_size]

    def cycle(self) -> int:
        """Send the next batch of ended runs (blocking); returns how many were sent."""
        since, sent = self._load()
        due = self._ended_since(since, sent)
        if not due:
            return 0
        export_trajectories(
            (self.store.get_trajectory(tid) for tid, _ in due), self.exporter, service_name=self.service_name
        )
        last = due[-1][1]
        at_last = {tid for tid, ended in due if ended == last}
        self._save(last, at_last | (sent if last == since else set()))
        return len(due)

    async def run(self) -> None:
        while True:
            try:
                while await asyncio.to_thread(self.cycle) >= self.batch_size:
                    pass  # a backlog: keep going
            except Exception:
                log.exception("OTLP export failed; retrying in %.0fs", self.interval_s)
            await asyncio.sleep(self.interval_s)


def install_background_export(app: FastAPI, export: BackgroundExport) -> None:
    """Run `export` inside the app's lifespan (as governance's retention loop runs)."""
    inner = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(a: Any) -> AsyncIterator[Any]:
        async with inner(a) as state:
            task = asyncio.create_task(export.run())
            try:
                yield state
            finally:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                await asyncio.to_thread(export.exporter.shutdown)

    app.router.lifespan_context = lifespan
