"""The wire edge: `/v1/responses`, `/v1/messages` and `/v1/messages/count_tokens` as plain ASGI.

A request is validated and translated to a chat-completions body, then handed to the chat hot path
(`CompletionsEndpoint`) with a one-shot `receive`; its reply (JSON or SSE, as it arrives) is translated
back on the way out. So routing, the harness, token capture, the spool record and the ATDP are exactly
those of a chat completion. The hot path passes a call through natively when the upstream speaks the
protocol (`WireCall` in the scope).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import orjson
from starlette.types import Send

from evolvable.errors import EvolvableError, HTTPError
from evolvable.proxy.completions import CompletionsEndpoint
from evolvable.proxy.config import UpstreamConfig
from evolvable.proxy.limits import replay
from evolvable.proxy.response_history import ResponseHistory
from evolvable.proxy.wire import messages, messages_native, responses, responses_native
from evolvable.proxy.wire.base import NativeCodec, WireCall, WireError, WireRequest
from evolvable.proxy.wire.sse import AssistantTurn

if TYPE_CHECKING:
    from evolvable.proxy.runtime import ProxyRuntime

Headers = list[tuple[bytes, bytes]]


class Translator(Protocol):
    @property
    def turn(self) -> AssistantTurn: ...

    def start(self) -> bytes: ...
    def feed(self, chunk: bytes) -> bytes: ...
    def finish(self) -> bytes: ...


@dataclass(frozen=True)
class Adapter:
    """One wire protocol's functions (see `responses` and `messages`)."""

    protocol: str
    native_path: str
    id_prefix: str
    parse: Callable[[dict[str, Any]], WireRequest]
    reply: Callable[[dict[str, Any], str, WireRequest], tuple[dict[str, Any], AssistantTurn]]
    stream: Callable[[str, WireRequest], Translator]
    render_error: Callable[..., bytes]
    rewrap_error: Callable[[int, bytes], bytes]
    normaliser: NativeCodec


ADAPTERS = {
    "responses": Adapter(
        responses.PROTOCOL,
        responses.NATIVE_PATH,
        responses.ID_PREFIX,
        responses.parse,
        responses.reply,
        responses.StreamTranslator,
        responses.render_error,
        responses.rewrap_error,
        responses_native.Normaliser(),
    ),
    "messages": Adapter(
        messages.PROTOCOL,
        messages.NATIVE_PATH,
        messages.ID_PREFIX,
        messages.parse,
        messages.reply,
        messages.StreamTranslator,
        messages.render_error,
        messages.rewrap_error,
        messages_native.Normaliser(),
    ),
}


def _ms(seconds: float) -> float:
    return round(seconds * 1000.0, 3)


async def _send_json(send: Any, status: int, body: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


def edge_headers(headers: Headers) -> Headers:
    """The client's headers for the hot path: no content-length (the body changes), and Anthropic's
    `x-api-key` as the bearer when no `Authorization` is given."""
    out = [(k, v) for k, v in headers if k != b"content-length"]
    names = {k for k, _ in out}
    api_key = next((v for k, v in out if k == b"x-api-key"), None)
    if api_key and b"authorization" not in names:
        out.append((b"authorization", b"Bearer " + api_key.strip()))
    return out


class WireEndpoint:
    """ASGI handler for the wire protocols, in front of the chat hot path."""

    def __init__(self, runtime: ProxyRuntime, hot_path: CompletionsEndpoint) -> None:
        self.rt, self.hot_path = runtime, hot_path
        self.history = ResponseHistory()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any, kind: str) -> None:
        if kind == "count_tokens":
            return await self.count_tokens(scope, receive, send)
        adapter = ADAPTERS[kind]
        t_start = time.perf_counter()
        headers = edge_headers(scope["headers"])
        try:
            request = await self._request(scope, receive, adapter, headers)
        except HTTPError as err:  # a WireError, or the hot path's refusal, in the protocol's own shape
            return await _send_json(
                send, err.status, adapter.render_error(err.status, err.message, err.code or err.error_type, err.param)
            )
        call = WireCall(adapter.protocol, adapter.native_path, request, adapter.normaliser, id_prefix=adapter.id_prefix)
        call.extra_headers = _forwarded_headers(headers)
        body = orjson.dumps(request.chat)
        relay = _Relay(send, adapter, request, call, time.perf_counter() - t_start)
        inner_scope = {**scope, "headers": headers, "evolvable.wire": call}
        await self.hot_path(inner_scope, replay(body, receive), relay, "chat")
        if kind == "responses" and relay.turn is not None and relay.answered and request.store:
            owner = (call.tenant_id or "default", call.session_id)
            self.history.remember(relay.wire_id, owner, responses.conversation(request, relay.turn.message()))

    async def _read_json(self, scope: dict[str, Any], receive: Any) -> dict[str, Any]:
        """The request body as a JSON object (size-limited as on the chat path), or a WireError."""
        if scope["method"] != "POST":
            raise WireError(405, "use POST", "method_not_allowed")
        raw = await self.hot_path._read_body(scope, receive, self.rt.config.max_body_bytes)
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as err:
            raise WireError(400, f"request body is not valid JSON: {err}", "invalid_json") from None
        if not isinstance(body, dict):
            raise WireError(400, "request body must be a JSON object", "invalid_json")
        return body

    async def _request(self, scope: dict[str, Any], receive: Any, adapter: Adapter, headers: Headers) -> WireRequest:
        body = await self._read_json(scope, receive)
        request = adapter.parse(body)
        previous = body.get("previous_response_id")
        if previous and "responses" not in self._upstream(body.get("model")).protocols:
            principal, session, _ = await self.hot_path._identify(dict(headers))
            owner = (principal.tenant_id, session.id if session else None)
            history = await self.history.recall(self.rt, previous, owner)
            if history is None:
                raise WireError(
                    404,
                    f"Previous response with id '{previous}' not found.",
                    "previous_response_not_found",
                    "previous_response_id",
                )
            responses.with_history(request, history)
        return request

    def _upstream(self, model: Any) -> UpstreamConfig:
        """The upstream a model name routes to before any rewriter (for what it speaks)."""
        alias = self.rt.config.models.get(model) if isinstance(model, str) else None
        try:
            return self.rt.config.upstream(alias.upstream if alias else None)
        except EvolvableError as err:
            raise WireError(400, str(err), "unknown_upstream") from None

    # ------------------------------------------------------------------ count_tokens

    async def count_tokens(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """Exact counts from the upstream: its native count_tokens, vLLM's `/tokenize`, or (for a chat-only
        server without it) the prompt_tokens of a one-token chat completion. Not recorded: no model call."""
        render = messages.render_error
        headers = edge_headers(scope["headers"])
        try:
            request = messages.parse(await self._read_json(scope, receive), counting=True)
            _, _, forward = await self.hot_path._identify(dict(headers))
            status, payload = await self._count(request, forward, _forwarded_headers(headers))
        except HTTPError as err:
            status, payload = err.status, render(err.status, err.message)
        await _send_json(send, status, payload)

    async def _count(self, request: WireRequest, forward: str | None, extra: dict[str, str]) -> tuple[int, bytes]:
        model = request.chat["model"]
        upstream = self._upstream(model)
        alias = self.rt.config.models.get(model)
        served = (alias.served_model if alias else None) or model
        headers = self.rt.upstream.headers(upstream, forward)
        attempts: list[tuple[str, dict[str, Any]]] = []
        if "messages" in upstream.protocols:
            headers = {**headers, **messages.anthropic_headers(headers, extra)}
            attempts.append((messages.COUNT_PATH, {**request.native, "model": served}))
        chat = {**request.chat, "model": served}
        attempts.append(("/tokenize", {k: chat[k] for k in ("model", "messages", "tools") if k in chat}))
        attempts.append(("/v1/chat/completions", {**chat, "max_tokens": 1}))
        last = "no attempt"
        for path, payload in attempts:
            try:
                resp = await self.rt.upstream.post(upstream, path, orjson.dumps(payload), headers)
                raw = await resp.read()
                resp.release()
            except EvolvableError as err:
                return 502, messages.render_error(502, str(err))
            count = _count_from(path, resp.status, raw)
            if count is not None:
                return 200, messages.count_tokens_reply(count)
            last = f"{path}: HTTP {resp.status}"
            if path == messages.COUNT_PATH:  # a native server's own answer (even an error) is the answer
                return resp.status, messages.rewrap_error(resp.status, raw)
        return 502, messages.render_error(502, f"upstream {upstream.name} cannot count tokens ({last})")


def _count_from(path: str, status: int, raw: bytes) -> int | None:
    if status != 200:
        return None
    try:
        reply = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(reply, dict):
        return None
    value = reply.get("input_tokens") if path == messages.COUNT_PATH else reply.get("count")
    if path == "/v1/chat/completions":
        value = (reply.get("usage") or {}).get("prompt_tokens")
    return value if isinstance(value, int) else None


_FORWARDED = (b"anthropic-version", b"anthropic-beta", b"openai-beta")


def _forwarded_headers(headers: Headers) -> dict[str, str]:
    """Protocol headers a native upstream needs from the client."""
    return {k.decode(): v.decode("latin-1") for k, v in headers if k in _FORWARDED}


class _Relay:
    """`send` for the hot path: translates its chat answer (JSON or SSE) into the wire protocol."""

    def __init__(self, send: Send, adapter: Adapter, request: WireRequest, call: WireCall, pre_s: float) -> None:
        self.send, self.adapter, self.request, self.call = send, adapter, request, call
        self.pre_s = pre_s
        self.status = 0
        self.start: dict[str, Any] | None = None
        self.translator: Translator | None = None
        self.parts: list[bytes] = []
        self.wire_id = ""
        self.turn: AssistantTurn | None = None
        self.answered = False

    async def __call__(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            return await self._on_start(message)
        if message["type"] != "http.response.body":
            return await self.send(message)
        if self.start is None:  # streaming (or passed through): bytes flow as they come
            return await self._on_stream_body(message)
        self.parts.append(message.get("body", b""))
        if not message.get("more_body"):
            await self._send_whole()

    async def _on_start(self, message: dict[str, Any]) -> None:
        self.status = message["status"]
        headers = dict(message.get("headers") or ())
        self.wire_id = self.adapter.id_prefix + headers.get(b"x-request-id", b"").decode()
        streaming = headers.get(b"content-type", b"").startswith(b"text/event-stream")
        if not streaming:
            self.start = message  # held until the body is translated (its length changes)
            return
        if not self.call.passed_through:
            self.translator = self.adapter.stream(self.wire_id, self.request)
        await self.send({**message, "headers": _with_overhead(message["headers"], self.pre_s)})
        if self.translator is not None:
            await self.send({"type": "http.response.body", "body": self.translator.start(), "more_body": True})

    async def _on_stream_body(self, message: dict[str, Any]) -> None:
        if self.translator is None:
            return await self.send(message)
        out = self.translator.feed(message.get("body", b""))
        more = bool(message.get("more_body"))
        if not more:
            out += self.translator.finish()
            self.turn = self.translator.turn
            self.answered = self.turn.error is None
        if out or not more:
            await self.send({"type": "http.response.body", "body": out, "more_body": more})

    async def _send_whole(self) -> None:
        t0 = time.perf_counter()
        raw = b"".join(self.parts)
        assert self.start is not None
        if self.status == 200 and self.request.stream and not self.call.passed_through:
            return await self._send_as_stream(raw)
        if self.status == 200 and not self.call.passed_through:
            wire_reply, self.turn = self.adapter.reply(orjson.loads(raw), self.wire_id, self.request)
            out = orjson.dumps(wire_reply)
            self.answered = True
        elif self.status != 200:
            out = self.adapter.rewrap_error(self.status, raw)
        else:
            out = raw
        headers = [(k, v) for k, v in self.start["headers"] if k != b"content-length"]
        headers = _with_overhead(headers, self.pre_s + time.perf_counter() - t0)
        headers.append((b"content-length", str(len(out)).encode()))
        await self.send({**self.start, "headers": headers})
        await self.send({"type": "http.response.body", "body": out})

    async def _send_as_stream(self, raw: bytes) -> None:
        """The client asked for a stream and the upstream answered with one reply: the protocol's events
        for it, from the reply as a single chat chunk."""
        assert self.start is not None
        turn = AssistantTurn.from_chat_reply(orjson.loads(raw))
        delta: dict[str, Any] = {"content": turn.text if turn.has_text else None}
        if turn.tool_calls:
            delta["tool_calls"] = [
                {"index": i, "id": c["id"], "function": {"name": c["name"], "arguments": c["arguments"]}}
                for i, c in enumerate(turn.tool_calls)
            ]
        chunk = {
            "model": turn.model,
            "usage": turn.usage,
            "choices": [{"index": 0, "delta": delta, "finish_reason": turn.finish_reason}],
        }
        translator = self.adapter.stream(self.wire_id, self.request)
        body = translator.start() + translator.feed(b"data: " + orjson.dumps(chunk) + b"\n\n") + translator.finish()
        self.turn, self.answered = translator.turn, translator.turn.error is None
        headers = [(k, v) for k, v in self.start["headers"] if k not in (b"content-length", b"content-type")]
        headers = [(b"content-type", b"text/event-stream; charset=utf-8"), *_with_overhead(headers, self.pre_s)]
        await self.send({**self.start, "headers": headers})
        await self.send({"type": "http.response.body", "body": body})


def _with_overhead(headers: Headers, added_s: float) -> Headers:
    """The hot path's overhead figure plus what the wire edge added."""
    out = []
    for k, v in headers:
        if k == b"x-evolvable-overhead-ms":
            with contextlib.suppress(ValueError):
                v = str(round(float(v) + _ms(added_s), 3)).encode()
        out.append((k, v))
    return out
