"""A fast OpenAI-compatible mock upstream for benchmarks: uvloop + httptools, a fixed ~460-byte chat
completion, or a 20-chunk SSE stream when the request says `"stream": true`.

A slow mock hides the proxy's cost (one written on http.server added ~44 ms per request), so this one
parses with httptools and answers with one write per response.

    python benchmarks/mock_upstream.py --port 9000
"""

from __future__ import annotations

import argparse
import asyncio
import json

import httptools
import uvloop

COMPLETION = json.dumps(
    {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "mock",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "The order A-1 shipped yesterday and arrives on Friday."},
                "finish_reason": "stop",
                "logprobs": None,
            }
        ],
        "usage": {"prompt_tokens": 42, "completion_tokens": 12, "total_tokens": 54},
    }
).encode()

MODELS = json.dumps({"object": "list", "data": [{"id": "mock", "object": "model", "owned_by": "bench"}]}).encode()


def _sse_stream(chunks: int = 20) -> bytes:
    parts = []
    for i in range(chunks):
        delta = {"role": "assistant", "content": ""} if i == 0 else {"content": f"tok{i} "}
        finish = "stop" if i == chunks - 1 else None
        chunk = {
            "id": "chatcmpl-bench",
            "object": "chat.completion.chunk",
            "created": 1700000000,
            "model": "mock",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        parts.append(b"data: " + json.dumps(chunk).encode() + b"\n\n")
    parts.append(b"data: [DONE]\n\n")
    return b"".join(parts)


STREAM_CHUNKS = _sse_stream()


def _response(body: bytes, content_type: bytes) -> bytes:
    return (
        b"HTTP/1.1 200 OK\r\ncontent-type: "
        + content_type
        + b"\r\ncontent-length: "
        + str(len(body)).encode()
        + b"\r\nconnection: keep-alive\r\n\r\n"
        + body
    )


JSON_RESPONSE = _response(COMPLETION, b"application/json")
MODELS_RESPONSE = _response(MODELS, b"application/json")


class MockProtocol(asyncio.Protocol):
    def __init__(self) -> None:
        self.parser = httptools.HttpRequestParser(self)
        self.body: list[bytes] = []
        self.url = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            assert self.transport is not None
            self.transport.close()

    def on_url(self, url: bytes) -> None:
        self.url = url

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        assert self.transport is not None
        body = b"".join(self.body)
        self.body = []
        if self.url.endswith(b"/models"):
            self.transport.write(MODELS_RESPONSE)
        elif b'"stream":true' in body or b'"stream": true' in body:
            self.transport.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n"
                b"connection: keep-alive\r\n\r\n"
            )
            for event in STREAM_CHUNKS.split(b"\n\n")[:-1]:
                piece = event + b"\n\n"
                self.transport.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            self.transport.write(b"0\r\n\r\n")
        else:
            self.transport.write(JSON_RESPONSE)


async def serve(host: str, port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(MockProtocol, host, port, backlog=1024)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9000)
    args = parser.parse_args()
    uvloop.run(serve(args.host, args.port))


if __name__ == "__main__":
    main()
