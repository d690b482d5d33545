"""OTLP/HTTP trace bodies in and out: JSON or protobuf, optionally gzip, decoded to OTLP JSON dicts.

The converters speak OTLP JSON (hex ids); protobuf bodies are parsed with the `opentelemetry-proto`
types and mapped to the same shape, so one code path stores both encodings.
"""

from __future__ import annotations

import base64
import zlib
from dataclasses import dataclass
from typing import Any

import orjson
from google.protobuf.json_format import MessageToDict
from google.protobuf.message import DecodeError
from google.rpc import status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

JSON = "application/json"
PROTOBUF = "application/x-protobuf"
_GRPC_CODES = {400: 3, 401: 16, 403: 7, 404: 5, 413: 8, 415: 3, 503: 14}
"""HTTP status -> google.rpc.Code, for the Status body OTLP clients read on errors."""


class OTLPBodyError(Exception):
    """A request body the receiver cannot read; `status` is the HTTP status to answer."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


@dataclass(frozen=True)
class Encoding:
    media_type: str

    @classmethod
    def of(cls, content_type: str | None) -> Encoding:
        base = (content_type or "").split(";", 1)[0].strip().lower()
        if base not in (JSON, PROTOBUF):
            raise OTLPBodyError(415, f"unsupported content type {base or '(none)'!r}; send {JSON} or {PROTOBUF}")
        return cls(base)


def inflate(body: bytes, content_encoding: str | None, limit: int) -> bytes:
    """The body without its content encoding, refusing more than `limit` bytes (a gzip bomb stops there)."""
    encoding = (content_encoding or "identity").strip().lower()
    if encoding == "identity":
        return body
    if encoding != "gzip":
        raise OTLPBodyError(415, f"unsupported content encoding {encoding!r}; send gzip or none")
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        out = inflater.decompress(body, limit + 1)
    except zlib.error as err:
        raise OTLPBodyError(400, f"body is not valid gzip: {err}") from None
    if len(out) > limit:
        raise OTLPBodyError(413, f"decompressed body exceeds {limit} bytes")
    if not inflater.eof:
        raise OTLPBodyError(400, "body is not valid gzip: truncated stream")
    return out


def decode_request(body: bytes, encoding: Encoding) -> dict[str, Any]:
    """An ExportTraceServiceRequest as an OTLP JSON dict (hex trace and span ids)."""
    if encoding.media_type == JSON:
        try:
            doc = orjson.loads(body) if body else {}
        except orjson.JSONDecodeError as err:
            raise OTLPBodyError(400, f"body is not valid JSON: {err}") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("resourceSpans", []), list):
            raise OTLPBodyError(400, "body is not an ExportTraceServiceRequest: expected {'resourceSpans': [...]}")
        return {"resourceSpans": doc.get("resourceSpans", [])}
    try:
        message = ExportTraceServiceRequest.FromString(body)
    except DecodeError as err:
        raise OTLPBodyError(400, f"body is not a protobuf ExportTraceServiceRequest: {err}") from None
    decoded: dict[str, Any] = MessageToDict(message)
    for rs in decoded.get("resourceSpans", []):
        for ss in rs.get("scopeSpans", []):
            for span in ss.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = base64.b64decode(span[key]).hex()
    decoded.setdefault("resourceSpans", [])
    return decoded


def encode_response(encoding: Encoding, rejected_spans: int, error_message: str) -> bytes:
    """ExportTraceServiceResponse; `partial_success` set only when spans were rejected."""
    response = ExportTraceServiceResponse()
    if rejected_spans:
        response.partial_success.rejected_spans = rejected_spans
        response.partial_success.error_message = error_message
    if encoding.media_type == PROTOBUF:
        encoded: bytes = response.SerializeToString()
        return encoded
    return orjson.dumps(MessageToDict(response))


def encode_status(media_type: str, http_status: int, message: str) -> bytes:
    """The google.rpc.Status body OTLP/HTTP answers errors with, in the request's encoding."""
    status = status_pb2.Status(code=_GRPC_CODES.get(http_status, 2), message=message)
    if media_type == PROTOBUF:
        encoded: bytes = status.SerializeToString()
        return encoded
    return orjson.dumps(MessageToDict(status))
