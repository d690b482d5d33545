"""GenAI spans made by the real OpenTelemetry SDK, for the OTLP receiver and exporter tests."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from google.protobuf.json_format import MessageToDict
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode

PROTOBUF = "application/x-protobuf"


def _messages(role: str, text: str) -> str:
    return json.dumps([{"role": role, "parts": [{"type": "text", "content": text}]}])


def run_agent(exporter: SpanExporter, question: str = "Where is order 7? Mail me at ann@example.com") -> str:
    """One agent run as GenAI-instrumented code emits it; each span is exported as it ends (children
    first, the root last), so the trace reaches the exporter in several batches. Returns the trace id."""
    provider = TracerProvider(resource=Resource.create({"service.name": "support-agent"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("tests.otel")
    with tracer.start_as_current_span(
        "invoke_agent support",
        attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support"},
    ) as root:
        with tracer.start_as_current_span("chat gpt-4o", kind=SpanKind.CLIENT) as chat:
            chat.set_attributes(
                {
                    "gen_ai.operation.name": "chat",
                    "gen_ai.request.model": "gpt-4o",
                    "gen_ai.usage.input_tokens": 31,
                    "gen_ai.usage.output_tokens": 7,
                    "gen_ai.response.finish_reasons": ["tool_calls"],
                    "gen_ai.input.messages": _messages("user", question),
                    "gen_ai.output.messages": json.dumps(
                        [
                            {
                                "role": "assistant",
                                "parts": [
                                    {"type": "tool_call", "id": "call_1", "name": "lookup", "arguments": {"id": 7}}
                                ],
                            }
                        ]
                    ),
                }
            )
        with tracer.start_as_current_span("execute_tool lookup") as tool:
            tool.set_attributes(
                {
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": "lookup",
                    "gen_ai.tool.call.id": "call_1",
                    "gen_ai.tool.call.result": '{"status": "shipped"}',
                }
            )
            tool.set_status(Status(StatusCode.OK))
        with tracer.start_as_current_span("chat gpt-4o", kind=SpanKind.CLIENT) as chat:
            chat.set_attributes(
                {
                    "gen_ai.operation.name": "chat",
                    "gen_ai.request.model": "gpt-4o",
                    "gen_ai.input.messages": _messages("tool", "shipped"),
                    "gen_ai.output.messages": _messages("assistant", "Order 7 has shipped."),
                }
            )
        trace_id = format(root.get_span_context().trace_id, "032x")
    provider.shutdown()
    return trace_id


def recorded_spans(question: str = "Where is order 7? Mail me at ann@example.com") -> list[ReadableSpan]:
    memory = InMemorySpanExporter()
    run_agent(memory, question)
    return list(memory.get_finished_spans())


def otlp_json(spans: Sequence[ReadableSpan]) -> dict[str, Any]:
    """The SDK's own OTLP encoding of `spans`, in OTLP/JSON (hex ids), as a JSON exporter sends it."""
    doc = MessageToDict(encode_spans(spans))
    for rs in doc["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for span in ss["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = base64.b64decode(span[key]).hex()
    return doc


class OTLPSink:
    """A local OTLP/HTTP endpoint that keeps what it receives and answers `status`."""

    def __init__(self, status: int = 200) -> None:
        self.requests: list[tuple[dict[str, str], bytes]] = []
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["content-length"]))
                sink.requests.append(({k.lower(): v for k, v in self.headers.items()}, body))
                self.send_response(status)
                self.send_header("content-type", PROTOBUF)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
