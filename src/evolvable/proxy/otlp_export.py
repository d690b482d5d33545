"""OTLP out: stored trajectories as GenAI spans, sent with the OpenTelemetry SDK's OTLP/HTTP exporter.

The span shapes are `protocol.converters.otel.to_otel`'s (GenAI conventions plus `evolvable.*` for a
lossless round trip); here they become SDK `ReadableSpan`s, so the SDK's exporter does the encoding,
compression and retries, and Evolvable's data shows in whatever tracing backend a team runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from itertools import islice
from typing import Any
from urllib.parse import urlsplit

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
