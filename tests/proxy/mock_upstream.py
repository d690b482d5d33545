"""A scriptable OpenAI-compatible upstream (aiohttp) for the proxy tests.

The model name picks the behaviour: `mock` answers with text, `mock-tools` with one tool call
(`mock-tools-parallel`: two), `reject-token-fields` refuses vLLM's token fields with a 400,
`error-500`, `malformed`, `slow` (sleeps), `stream-slow` (pauses between chunks), `ignore-stream`
(answers a stream request with one JSON reply). `/v1/responses` and
`/v1/messages` answer natively (an echo), for the wire pass-through tests. Token ids and
logprobs are returned with vLLM's field names when asked for. Every request body is kept in `requests`.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from typing import Any

from aiohttp import web

PROMPT_IDS = [101, 102, 103]


def _pieces(text: str) -> list[str]:
    """Stream deltas that join to exactly `text`."""
    return [text[i : i + 4] for i in range(0, len(text), 4)]


def _words(text: str) -> list[str]:
    return [w + " " for w in text.split()] or ["ok"]


_MALFORMED_REPLIES = {
    "malformed-utf8": b'{"id":"x","choices":[{"index":0,"message":{"role":"assistant","content":"caf\xe9"}}]}',
    "malformed-no-choices": b'{"id":"x","object":"chat.completion"}',
    "malformed-null-choices": b'{"id":"x","choices":null}',
    "malformed-trailing": b'{"id":"x","choices":[]} and more',
    "malformed-array": b'[{"choices":[]}]',
    "malformed-nan": b'{"id":"x","usage":{"total_tokens":NaN},"choices":[]}',
}
"""Replies no chat client can use (model name -> bytes sent with 200)."""
UNICODE_CHOICE = {
    "index": 0,
    "message": {"role": "assistant", "content": "Grüße aus München — 東京 ✓"},
    "finish_reason": "stop",
}


class MockUpstream:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.native_headers: list[dict[str, str]] = []
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self.stream_delay_s = 0.05

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    # ------------------------------------------------------------------ answers

    def _answer_parts(self, body: dict[str, Any], index: int) -> dict[str, Any]:
        model = body.get("model", "")
        last = next((m for m in reversed(body.get("messages") or []) if m.get("role") in ("user", "tool")), {})
        text = f"echo {index}: {last.get('content', body.get('prompt', ''))}"
        calls = []
        if model.startswith("mock-tools") and last.get("role") == "user":
            calls.append(
                {
                    "id": f"call_{len(self.requests)}_{index}_a",
                    "name": "lookup_order",
                    "arguments": '{"order_id": "A-1"}',
                }
            )
            if model == "mock-tools-parallel":
                calls.append(
                    {
                        "id": f"call_{len(self.requests)}_{index}_b",
                        "name": "get_weather",
                        "arguments": '{"city": "Paris"}',
                    }
                )
        return {"text": None if calls else text, "calls": calls}

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        model = body.get("model", "")
        if model == "reject-token-fields" and ("return_token_ids" in body or "logprobs" in body):
            return web.json_response(
                {"error": {"message": "unknown field return_token_ids", "type": "invalid_request_error"}}, status=400
            )
        if model == "error-500":
            return web.json_response(
                {"error": {"message": "engine exploded", "type": "server_error", "code": "boom"}}, status=500
            )
        if model == "malformed":
            return web.Response(text="this is not json", content_type="application/json")
        if model in _MALFORMED_REPLIES:
            return web.Response(body=_MALFORMED_REPLIES[model], content_type="application/json")
        if model == "unicode-reply":
            reply = {"id": "chatcmpl-u", "object": "chat.completion", "model": model, "choices": [UNICODE_CHOICE]}
            return web.Response(body=json.dumps(reply, ensure_ascii=False).encode(), content_type="application/json")
        if model == "slow":
            await asyncio.sleep(5)
        want_ids, want_lps = bool(body.get("return_token_ids")), bool(body.get("logprobs"))
        n = int(body.get("n") or 1)
        if body.get("stream") and model != "ignore-stream":
            return await self._stream(request, body, n, want_ids, want_lps)
        choices = []
        for i in range(n):
            parts = self._answer_parts(body, i)
            message: dict[str, Any] = {"role": "assistant", "content": parts["text"]}
            if parts["calls"]:
                message["tool_calls"] = [
                    {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                    for c in parts["calls"]
                ]
            ntok = len(_words(parts["text"] or "x y"))
            choice: dict[str, Any] = {
                "index": i,
                "message": message,
                "finish_reason": "tool_calls" if parts["calls"] else "stop",
                "logprobs": None,
            }
            if want_ids:
                choice["token_ids"] = list(range(200 + i * 10, 200 + i * 10 + ntok))
            if want_lps:
                choice["logprobs"] = {
                    "content": [
                        {"token": f"t{j}", "logprob": -0.1 * (j + 1), "bytes": None, "top_logprobs": []}
                        for j in range(ntok)
                    ]
                }
            choices.append(choice)
        reply: dict[str, Any] = {
            "id": f"chatcmpl-{len(self.requests)}",
            "object": "chat.completion",
            "created": 1700000000,
            "model": model,
            "choices": choices,
            "usage": {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8},
        }
        if want_ids:
            reply["prompt_token_ids"] = PROMPT_IDS
        return web.json_response(reply)

    async def _stream(
        self, request: web.Request, body: dict[str, Any], n: int, want_ids: bool, want_lps: bool
    ) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        rid = f"chatcmpl-{len(self.requests)}"
        model = body.get("model", "")
        delay = self.stream_delay_s if model == "stream-slow" else 0.0

        async def emit(chunk: dict[str, Any]) -> None:
            base = {"id": rid, "object": "chat.completion.chunk", "created": 1700000000, "model": model}
            await resp.write(b"data: " + json.dumps({**base, **chunk}).encode() + b"\n\n")
            if delay:
                await asyncio.sleep(delay)

        first: dict[str, Any] = {
            "choices": [
                {"index": i, "delta": {"role": "assistant", "content": ""}, "finish_reason": None} for i in range(n)
            ]
        }
        if want_ids:
            first["prompt_token_ids"] = PROMPT_IDS
        await emit(first)
        tok = 0
        for i in range(n):
            parts = self._answer_parts(body, i)
            pieces = _words(parts["text"]) if parts["text"] else []
            if model == "stream-slow":
                pieces = pieces * 40
            for piece in pieces:
                choice: dict[str, Any] = {"index": i, "delta": {"content": piece}, "finish_reason": None}
                if want_ids:
                    choice["token_ids"] = [300 + tok]
                if want_lps:
                    choice["logprobs"] = {
                        "content": [{"token": piece, "logprob": -0.5, "bytes": None, "top_logprobs": []}]
                    }
                tok += 1
                await emit({"choices": [choice]})
            for k, call in enumerate(parts["calls"]):
                await emit(
                    {
                        "choices": [
                            {
                                "index": i,
                                "delta": {
                                    "tool_calls": [
                                        {
                                            "index": k,
                                            "id": call["id"],
                                            "type": "function",
                                            "function": {"name": call["name"], "arguments": ""},
                                        }
                                    ]
                                },
                                "finish_reason": None,
                            }
                        ]
                    }
                )
                args = call["arguments"]
                for piece in (args[: len(args) // 2], args[len(args) // 2 :]):
                    choice = {
                        "index": i,
                        "delta": {"tool_calls": [{"index": k, "function": {"arguments": piece}}]},
                        "finish_reason": None,
                    }
                    if want_ids:
                        choice["token_ids"] = [400 + tok]
                    if want_lps:
                        choice["logprobs"] = {
                            "content": [{"token": piece, "logprob": -0.25, "bytes": None, "top_logprobs": []}]
                        }
                    tok += 1
                    await emit({"choices": [choice]})
            await emit(
                {"choices": [{"index": i, "delta": {}, "finish_reason": "tool_calls" if parts["calls"] else "stop"}]}
            )
        if (body.get("stream_options") or {}).get("include_usage"):
            await emit(
                {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": tok, "total_tokens": 3 + tok}}
            )
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def completions(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests.append(body)
        reply: dict[str, Any] = {
            "id": f"cmpl-{len(self.requests)}",
            "object": "text_completion",
            "model": body.get("model"),
            "choices": [
                {"index": 0, "text": f"completed: {body.get('prompt')}", "finish_reason": "length", "logprobs": None}
            ],
            "usage": {"prompt_tokens": 2, "completion_tokens": 2, "total_tokens": 4},
        }
        if body.get("return_token_ids"):
            reply["choices"][0]["token_ids"] = [7, 8]
            reply["choices"][0]["prompt_token_ids"] = [5, 6]
        if body.get("logprobs") is not None:
            reply["choices"][0]["logprobs"] = {
                "tokens": ["a", "b"],
                "token_logprobs": [-0.3, -0.4],
                "top_logprobs": None,
                "text_offset": [0, 1],
            }
        return web.json_response(reply)

    # ------------------------------------------------------------------ native Responses / Messages

    async def responses(self, request: web.Request) -> web.StreamResponse:
        """A Responses-speaking server: echoes the last input text (for pass-through tests)."""
        body = await request.json()
        self.requests.append(body)
        self.native_headers.append(dict(request.headers))
        items = body["input"] if isinstance(body["input"], list) else [{"content": body["input"]}]
        text = f"native: {items[-1].get('content')}"
        item = {
            "id": "msg_native",
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }
        response = {
            "id": f"resp_native_{len(self.requests)}",
            "object": "response",
            "created_at": 1700000000,
            "status": "completed",
            "model": body["model"],
            "output": [item],
            "usage": {"input_tokens": 4, "output_tokens": 2, "total_tokens": 6},
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
        }
        if not body.get("stream"):
            return web.json_response(response)
        events = [
            {"type": "response.created", "response": {**response, "status": "in_progress", "output": []}},
            {"type": "response.output_item.added", "output_index": 0, "item": {**item, "content": []}},
            *(
                {
                    "type": "response.output_text.delta",
                    "item_id": "msg_native",
                    "output_index": 0,
                    "content_index": 0,
                    "delta": w,
                }
                for w in _pieces(text)
            ),
            {"type": "response.output_item.done", "output_index": 0, "item": item},
            {"type": "response.completed", "response": response},
        ]
        return await self._native_stream(request, events)

    async def messages(self, request: web.Request) -> web.StreamResponse:
        """A Messages-speaking server: echoes the last user text (for pass-through tests)."""
        body = await request.json()
        self.requests.append(body)
        self.native_headers.append(dict(request.headers))
        text = f"native: {body['messages'][-1]['content']}"
        message = {
            "id": f"msg_native_{len(self.requests)}",
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 4, "output_tokens": 2},
        }
        if not body.get("stream"):
            return web.json_response(message)
        events = [
            {"type": "message_start", "message": {**message, "content": [], "stop_reason": None}},
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
            *(
                {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": w}}
                for w in _pieces(text)
            ),
            {"type": "content_block_stop", "index": 0},
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": 2},
            },
            {"type": "message_stop"},
        ]
        return await self._native_stream(request, events)

    async def count_tokens(self, request: web.Request) -> web.Response:
        await request.json()
        return web.json_response({"input_tokens": 42})

    async def _native_stream(self, request: web.Request, events: list[dict[str, Any]]) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for event in events:
            await resp.write(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode())
        await resp.write_eof()
        return resp

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "mock", "object": "model", "owned_by": "mock"}]})

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> MockUpstream:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        ready = threading.Event()

        def run() -> None:
            self._loop = asyncio.new_event_loop()
            app = web.Application()
            app.router.add_post("/v1/chat/completions", self.chat)
            app.router.add_post("/v1/completions", self.completions)
            app.router.add_get("/v1/models", self.models)
            app.router.add_post("/v1/responses", self.responses)
            app.router.add_post("/v1/messages", self.messages)
            app.router.add_post("/v1/messages/count_tokens", self.count_tokens)
            self._runner = web.AppRunner(app)
            self._loop.run_until_complete(self._runner.setup())
            site = web.SockSite(self._runner, sock)
            self._loop.run_until_complete(site.start())
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        ready.wait(10)
        return self

    def stop(self) -> None:
        if self._loop is None:
            return
        fut = asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop)  # type: ignore[union-attr]
        fut.result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread:
            self._thread.join(10)
