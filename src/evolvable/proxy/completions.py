"""The hot path: `/v1/chat/completions` and `/v1/completions` as a plain ASGI endpoint.

Per call it parses the body once (orjson), resolves the session from memory, lets the rewriter apply
the harness, forwards through the pooled client, passes the reply (or each SSE chunk, as it arrives)
to the client, and only then queues one raw capture record on the spool. No validation models, no
database I/O and no stream assembly happen here; the background writer does that.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import time
from dataclasses import dataclass
from typing import Any

import aiohttp
import msgspec
import orjson

from evolvable.errors import (
    HTTPError,
    InvalidRequest,
    PayloadTooLarge,
    ResourceNotFound,
    Unauthenticated,
    Unavailable,
    UpstreamError,
)
from evolvable.http_errors import openai_error_body, openai_shape
from evolvable.protocol.models import HandoffStep
from evolvable.proxy.capture import (
    SSEStripper,
    check_reply_shape,
    has_token_fields,
    llm_step_id,
    stripped_reply,
)
from evolvable.proxy.config import UpstreamConfig
from evolvable.proxy.hooks import Principal, RewriteResult, Role, SessionContext
from evolvable.proxy.limits import BodyTooLarge, ClientGone, InvalidInput, check_completion_body, read_body
from evolvable.proxy.metrics import UPSTREAM_SCOPE_KEY
from evolvable.proxy.records import CallRecord
from evolvable.proxy.runtime import ProxyRuntime, step_record
from evolvable.proxy.sessions import KEY_PREFIX, Session
from evolvable.proxy.wire.base import WireCall
from evolvable.proxy.wire.messages import native_headers

log = logging.getLogger("evolvable.proxy")

Scope = dict[str, Any]
_JSON = b"application/json"
_CAPTURE_UNAVAILABLE_TEXT = "the call could not be recorded (capture storage unavailable); it was not answered"
_CAPTURE_UNAVAILABLE = openai_error_body(_CAPTURE_UNAVAILABLE_TEXT, "server_error", "capture_unavailable")


_ID_PREFIX = os.urandom(8).hex()
_ID_COUNTER = itertools.count()


def new_request_id() -> str:
    """Unique across processes and restarts (random prefix) and cheap (no urandom per call)."""
    return f"{_ID_PREFIX}{next(_ID_COUNTER):016x}"


def _ms(seconds: float) -> float:
    return round(seconds * 1000.0, 3)


async def _send_bytes(send: Any, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", _JSON), (b"content-length", str(len(body)).encode()), *headers],
        }
    )
    await send({"type": "http.response.body", "body": body})


@dataclass(slots=True)
class _Exchange:
    """One call on its way back to the client: its capture record, its clocks, the ids it is answered with
    and which token fields the client asked for. (Not frozen: a frozen dataclass sets each field through
    `object.__setattr__`, 3.7x the CPU of building this one, per call; nothing assigns to it.)"""

    record: CallRecord
    t_start: float
    t_up: float
    ids_header: list[tuple[bytes, bytes]]
    keep_ids: bool
    keep_lps: bool

    @property
    def strips_token_fields(self) -> bool:
        """The proxy added token fields the client did not ask for: captured, then taken out of the reply."""
        return bool(self.record.injected) and not (self.keep_ids and self.keep_lps)


@dataclass(slots=True)
class _Route:
    """Where one call goes: the body to send, the served model, the upstream and the pinned versions."""

    body: dict[str, Any]
    model: Any
    upstream: UpstreamConfig
    harness_version: str | None
    policy_version: str | None


class CompletionsEndpoint:
    """ASGI handler for both completion endpoints; `endpoint` is `chat` or `completions`."""

    def __init__(self, runtime: ProxyRuntime) -> None:
        self.rt = runtime

    async def __call__(self, scope: Scope, receive: Any, send: Any, endpoint: str) -> None:
        t_start = time.perf_counter()
        try:
            await self._handle(scope, receive, send, endpoint, t_start)
        except HTTPError as err:
            overhead = _ms(time.perf_counter() - t_start)
            await _send_bytes(
                send,
                err.status,
                openai_shape(err),
                [(b"x-evolvable-overhead-ms", str(overhead).encode())],
            )

    # ------------------------------------------------------------------ request parsing and auth

    async def _read_body(self, scope: Scope, receive: Any, limit: int) -> bytes:
        try:
            return await read_body(scope, receive, limit)
        except BodyTooLarge as err:
            raise PayloadTooLarge(str(err)) from None
        except ClientGone:
            raise InvalidRequest("client disconnected while sending the body") from None

    async def _identify(self, headers: dict[bytes, bytes]) -> tuple[Principal, Session | None, str | None]:
        """The caller, its session (if any), and a bearer to forward upstream (only a non-Evolvable one)."""
        rt = self.rt
        auth = headers.get(b"authorization", b"").decode("latin-1")
        bearer = auth[7:].strip() if auth[:7].lower() == "bearer " else None
        if bearer and bearer.startswith(KEY_PREFIX):
            session = rt.sessions.cached_by_key(bearer)
            if session is None:
                session = await asyncio.to_thread(rt.sessions.load_by_key, bearer)
            if session is None:
                raise Unauthenticated("invalid session API key")
            if not session.running or not await rt.minting_key_active(session):
                raise Unauthenticated(
                    "this session key is no longer valid (session ended or key revoked)", code="session_key_expired"
                )
            return Principal(tenant_id=session.tenant_id, role=Role.session, session_id=session.id), session, None
        principal = await rt.authenticate(bearer)
        if principal is None:
            raise Unauthenticated("invalid API key")
        forward = bearer if rt.authenticator_is_open else None
        sid = headers.get(b"x-evolvable-session")
        if sid is None:
            return principal, None, forward
        sid_text = sid.decode("latin-1")
        session = rt.sessions.cached_by_id(sid_text) or await asyncio.to_thread(rt.sessions.load_by_id, sid_text)
        if session is None or session.tenant_id != principal.tenant_id:
            raise ResourceNotFound(f"session {sid_text} not found", code="session_not_found")
        return principal, session, forward

    # ------------------------------------------------------------------ the call

    async def _handle(self, scope: Scope, receive: Any, send: Any, endpoint: str, t_start: float) -> None:
        rt = self.rt
        body = await self._parse(scope, receive, endpoint)
        headers = dict(scope["headers"])
        principal, session, forward_bearer = await self._identify(headers)
        if rt.fails_closed and not rt.spool.may_try_write():
            # Capture is failing (disk full, read-only): refuse before paying the upstream for a call
            # that would be refused after it. One call every `probe_interval_s` still goes through to
            # find out when writing works again.
            rt.calls_refused += 1
            raise Unavailable(_CAPTURE_UNAVAILABLE_TEXT, code="capture_unavailable")

        request_id = new_request_id()
        trajectory_id, agent, end_user = await self._run_of(session, headers, body, request_id)

        client_model = body.get("model")
        route = await self._route(endpoint, body, principal, session, agent, trajectory_id, end_user)
        body, model, upstream = route.body, route.model, route.upstream
        harness_version, policy_version = route.harness_version, route.policy_version
        scope[UPSTREAM_SCOPE_KEY] = upstream.name
        wire = scope.get("evolvable.wire")  # a Responses/Messages call translated at the edge (proxy.wire)
        native = wire if wire is not None and wire.native_for(upstream, body) else None
        if wire is not None:
            wire.passed_through = native is not None
            wire.tenant_id, wire.session_id = principal.tenant_id, session.id if session else None

        keep_ids = bool(body.get("return_token_ids"))
        keep_lps = bool(body.get("logprobs"))
        send_body, injected = self._with_token_fields(body, upstream, endpoint, passed_through=native is not None)
        stream = bool(body.get("stream"))
        first_versions = bool(
            session and agent == session.agent and not session.versions_recorded and (harness_version or policy_version)
        )
        if session is not None:
            session.calls += 1
            if first_versions:
                session.versions_recorded = True
                session.harness_version, session.policy_version = harness_version, policy_version

        record = CallRecord(
            id=request_id,
            request_id=request_id,
            trajectory_id=trajectory_id,
            tenant_id=principal.tenant_id,
            session_id=session.id if session else None,
            agent=agent,
            run_agent=session.agent if session else agent,
            end_user=end_user,
            endpoint=endpoint,
            request=body,
            injected=injected,
            client_model=client_model if client_model != model else None,
            upstream=upstream.name,
            harness_version=harness_version,
            policy_version=policy_version,
            first_versions=first_versions,
            sub_agent=session is not None and agent != session.agent,
            stream=stream,
            started=time.time(),
        )
        path = "/v1/chat/completions" if endpoint == "chat" else "/v1/completions"
        up_headers = rt.upstream.headers(upstream, forward_bearer)
        if wire is not None:
            record.wire = wire.record(request_id, native is not None)
        if native is not None:
            path, send_body, up_headers = (
                native.native_path,
                native.native_body(model, body),
                native_headers(native, up_headers),
            )
        ids_header = [
            (b"x-request-id", request_id.encode()),
            (b"x-evolvable-trajectory-id", trajectory_id.encode()),
            (b"x-evolvable-step-id", llm_step_id(request_id).encode()),
        ]

        t_up = time.perf_counter()
        try:
            resp = await self._post(upstream, path, send_body, body, up_headers, record)
        except UpstreamError as err:
            await self._answer_failure(err, send, record, t_start, t_up, ids_header)
            return
        exchange = _Exchange(record, t_start, t_up, ids_header, keep_ids, keep_lps)
        if stream and resp.status == 200 and resp.content_type == "text/event-stream":
            if native is not None:
                record.sse_wire = native.protocol
            await self._stream(resp, receive, send, exchange)
            return
        await self._plain(resp, send, exchange, native)

    async def _run_of(
        self, session: Session | None, headers: dict[bytes, bytes], body: dict[str, Any], request_id: str
    ) -> tuple[str, str, str | None]:
        """(trajectory id, agent, end user) of the call: its session's, or a one-call trajectory's."""
        if session is None:
            agent = headers.get(b"x-evolvable-agent", b"default").decode("latin-1")
            user = body.get("user")
            return f"traj_{request_id}", agent, user if isinstance(user, str) else None
        # A per-call agent header inside a session names the sub-agent making this call.
        agent = headers.get(b"x-evolvable-agent", b"").decode("latin-1") or session.agent
        self.rt.sessions.touch(session)
        await _record_handoff(self.rt, session, agent)
        return session.id, agent, session.end_user

    async def _parse(self, scope: Scope, receive: Any, endpoint: str) -> dict[str, Any]:
        """The request body as a checked JSON object, or the 4xx that says what is wrong with it."""
        if scope["method"] != "POST":
            raise HTTPError("use POST", status=405, code="method_not_allowed")
        raw = await self._read_body(scope, receive, self.rt.config.max_body_bytes)
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as err:
            raise InvalidRequest(f"request body is not valid JSON: {err}", code="invalid_json") from None
        if not isinstance(body, dict):
            raise InvalidRequest("request body must be a JSON object", code="invalid_json")
        if endpoint == "chat":
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
                raise InvalidRequest("'messages' must be a non-empty list of message objects", code="missing_messages")
        elif "prompt" not in body:
            raise InvalidRequest("'prompt' is required", code="missing_prompt")
        try:
            check_completion_body(body, endpoint, raw)
        except InvalidInput as err:
            raise InvalidRequest(str(err), code="invalid_field") from None
        return body

    async def _route(
        self,
        endpoint: str,
        body: dict[str, Any],
        principal: Principal,
        session: Session | None,
        agent: str,
        trajectory_id: str,
        end_user: str | None,
    ) -> _Route:
        """Where the call goes and with which versions: the rewriter (harness, canary, policy) first,
        then the configured model aliases."""
        rt = self.rt
        harness_version = session.harness_version if session else None
        policy_version = session.policy_version if session else None
        upstream_name: str | None = None
        model = body.get("model")
        if rt.rewriter is not None:
            ctx = (
                session.call_context(agent, endpoint, end_user)
                if session is not None
                else SessionContext(principal.tenant_id, agent, trajectory_id, None, endpoint, end_user=end_user)
            )
            result = rt.rewriter.prepare(ctx, body)
            if not isinstance(result, RewriteResult):  # an async rewriter (a type check costs less than isawaitable)
                result = await result
            body = result.body
            sub_agent = session is not None and agent != session.agent
            harness_version = result.harness_version if sub_agent else (result.harness_version or harness_version)
            policy_version = result.policy_version or policy_version
            upstream_name = result.upstream_name
            model = result.model or body.get("model")
        alias = rt.config.models.get(model) if isinstance(model, str) else None
        if alias is not None:
            upstream_name = upstream_name or alias.upstream
            model = alias.served_model or model
        try:
            upstream = rt.config.upstream(upstream_name)
        except Exception as err:
            raise InvalidRequest(str(err), code="unknown_upstream") from None
        if model != body.get("model"):
            body = {**body, "model": model}
        return _Route(body, model, upstream, harness_version, policy_version)

    def _with_token_fields(
        self, body: dict[str, Any], upstream: UpstreamConfig, endpoint: str, *, passed_through: bool
    ) -> tuple[dict[str, Any], list[str]]:
        """The body to send, asking a vLLM-like upstream for token ids and logprobs the client did not ask
        for (they are captured, then stripped from its reply), and the names of the fields added."""
        injected: list[str] = []
        if passed_through or not self.rt.upstream.wants_token_fields(upstream):
            return body, injected
        send_body = dict(body)
        if not body.get("return_token_ids"):
            send_body["return_token_ids"] = True
            injected.append("return_token_ids")
        if not body.get("logprobs") and "logprobs" not in body:
            send_body["logprobs"] = True if endpoint == "chat" else 0
            injected.append("logprobs")
        return send_body, injected

    async def _post(
        self,
        upstream: UpstreamConfig,
        path: str,
        send_body: dict[str, Any] | bytes,
        body: dict[str, Any],
        headers: dict[str, str],
        record: CallRecord,
    ) -> aiohttp.ClientResponse:
        """Send the call. An upstream that refuses the injected token fields (400, `token_capture: auto`)
        is retried once without them and remembered; if it refuses that too, its first answer stands."""
        rt = self.rt
        resp = await rt.upstream.post(upstream, path, orjson.dumps(send_body), headers)
        if resp.status != 400 or not record.injected or upstream.token_capture != "auto":
            return resp
        first_error = await resp.read()
        resp.release()
        resp = await rt.upstream.post(upstream, path, orjson.dumps(body), headers)
        if resp.status == 400:
            resp.release()
            raise UpstreamError(first_error.decode("utf-8", "replace"), status_code=400, error_type="upstream_400")
        rt.upstream.state[upstream.name].accepts_token_fields = False
        log.info("upstream %s rejects token-capture fields; not asking again", upstream.name)
        record.injected = []
        return resp

    async def _answer_failure(
        self,
        err: UpstreamError,
        send: Any,
        record: CallRecord,
        t_start: float,
        t_up: float,
        ids_header: list[tuple[bytes, bytes]],
    ) -> None:
        """Record a call the upstream failed, and answer it (503 instead when it could not be recorded and
        capture fails closed)."""
        t_end = time.perf_counter()
        status = err.status_code
        if err.error_type == "upstream_400":
            payload = _error_payload(err.args[0].encode(), 400)
        else:
            payload = openai_error_body(str(err), "upstream_error", err.error_type)
        record.latency_ms = _ms(t_end - t_up)
        record.error = {"type": err.error_type, "message": str(err)[:2000], "status": status}
        if not await self.rt.spool_record(record) and self.rt.fails_closed:
            status, payload = 503, _CAPTURE_UNAVAILABLE
        overhead = _ms((time.perf_counter() - t_start) - (t_end - t_up))
        await _send_bytes(send, status, payload, [(b"x-evolvable-overhead-ms", str(overhead).encode()), *ids_header])

    async def _plain(
        self, resp: aiohttp.ClientResponse, send: Any, exchange: _Exchange, native: WireCall | None = None
    ) -> None:
        record, t_start, t_up, ids_header = exchange.record, exchange.t_start, exchange.t_up, exchange.ids_header
        cap = self.rt.config.max_upstream_reply_bytes
        read_error: aiohttp.ClientError | TimeoutError | ReplyTooLarge | None
        try:
            raw = await read_capped(resp, cap)
        except (aiohttp.ClientError, TimeoutError, ReplyTooLarge) as err:
            raw, read_error = b"", err
        else:
            read_error = None
        finally:
            resp.release()
        t_up_done = time.perf_counter()
        status = resp.status
        out = raw
        if isinstance(read_error, ReplyTooLarge):
            status = 502
            out = openai_error_body(str(read_error), "upstream_error", "upstream_reply_too_large")
            record.error = {"type": "upstream_reply_too_large", "message": str(read_error), "status": status}
        elif read_error is not None:
            status = 504 if isinstance(read_error, TimeoutError) else 502
            etype = "upstream_timeout" if status == 504 else "upstream_error"
            out = openai_error_body(f"upstream failed while sending its reply: {read_error!r}", "upstream_error", etype)
            record.error = {"type": etype, "message": repr(read_error), "status": status}
        elif status == 200:
            stripping = native is None and exchange.strips_token_fields and has_token_fields(raw)
            reply: Any = None
            try:
                if stripping:  # recorded as the bytes that came; the client's copy without what it did not ask for
                    out = stripped_reply(raw, exchange.keep_ids, exchange.keep_lps)
                elif native is None:
                    check_reply_shape(raw)  # recorded as the bytes that came, passed on as they came: no parse
                else:
                    reply = orjson.loads(raw)
                    if isinstance(reply, dict):  # recorded in chat form; the client gets `raw`
                        reply = native.normaliser.chat_reply(reply)
                    if not isinstance(reply, dict) or not isinstance(reply.get("choices"), list):
                        raise ValueError("no choices")
            except ValueError:  # (orjson.JSONDecodeError is one)
                status = 502
                out = openai_error_body(
                    "upstream returned a malformed reply", "upstream_error", "upstream_malformed_reply"
                )
                record.error = {
                    "type": "upstream_malformed_reply",
                    "message": raw[:500].decode("utf-8", "replace"),
                    "status": 502,
                }
            else:
                # The bytes as they came (no re-serialization); a native reply in the chat form it amounts to.
                record.reply = msgspec.Raw(raw) if native is None else reply
        else:
            out = _error_payload(raw, status)
            record.error = {
                "type": "upstream_error",
                "message": raw[:2000].decode("utf-8", "replace"),
                "status": status,
            }
        record.latency_ms = _ms(t_up_done - t_up)
        if not await self.rt.spool_record(record) and self.rt.fails_closed:
            status, out = 503, _CAPTURE_UNAVAILABLE
        t_end = time.perf_counter()
        overhead = _ms((t_end - t_start) - (t_up_done - t_up))
        await _send_bytes(send, status, out, [(b"x-evolvable-overhead-ms", str(overhead).encode()), *ids_header])

    async def _stream(self, resp: aiohttp.ClientResponse, receive: Any, send: Any, exchange: _Exchange) -> None:
        record, t_start, t_up, ids_header = exchange.record, exchange.t_start, exchange.t_up, exchange.ids_header
        t_headers = time.perf_counter()
        overhead = _ms(t_headers - t_start - (t_headers - t_up))
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"text/event-stream; charset=utf-8"),
                    (b"cache-control", b"no-cache"),
                    (b"x-evolvable-overhead-ms", str(overhead).encode()),
                    *ids_header,
                ],
            }
        )
        disconnected = asyncio.Event()

        async def watch() -> None:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    disconnected.set()
                    return

        watcher = asyncio.create_task(watch())
        stripper = SSEStripper(exchange.keep_ids, exchange.keep_lps) if exchange.strips_token_fields else None
        chunks: list[bytes] = []
        ttft: float | None = None
        cap, received = self.rt.config.max_upstream_reply_bytes, 0
        try:
            async for chunk in resp.content.iter_any():
                if ttft is None:
                    ttft = time.perf_counter()
                received += len(chunk)
                if received > cap:
                    raise ReplyTooLarge(cap)
                chunks.append(chunk)
                out = stripper.feed(chunk) if stripper is not None else chunk
                if disconnected.is_set():
                    record.error = {
                        "type": "client_disconnected",
                        "message": "client disconnected mid-stream",
                        "status": 499,
                    }
                    break
                if out:
                    await send({"type": "http.response.body", "body": out, "more_body": True})
            if stripper is not None and record.error is None:
                rest = stripper.flush()
                if rest:
                    await send({"type": "http.response.body", "body": rest, "more_body": True})
        except (aiohttp.ClientError, TimeoutError, ReplyTooLarge) as err:
            etype = (
                "upstream_timeout"
                if isinstance(err, TimeoutError)
                else "upstream_reply_too_large"
                if isinstance(err, ReplyTooLarge)
                else "upstream_stream_error"
            )
            record.error = {"type": etype, "message": repr(err), "status": 502}
            await send(
                {
                    "type": "http.response.body",
                    "body": b"data: "
                    + openai_error_body(f"upstream stream failed: {err!r}", "upstream_error", etype)
                    + b"\n\n",
                    "more_body": True,
                }
            )
        finally:
            resp.release()
            watcher.cancel()
        t_done = time.perf_counter()
        if disconnected.is_set() and record.error is None and ttft is None:
            record.error = {"type": "client_disconnected", "message": "client disconnected mid-stream", "status": 499}
        record.sse = b"".join(chunks).decode("utf-8", "replace")
        record.latency_ms = _ms(t_done - t_up)
        if ttft is not None:
            record.ttft_ms = _ms(ttft - t_up)
        # The stream ends only once the call is captured: a client that saw the end saw a captured call.
        if not await self.rt.spool_record(record) and self.rt.fails_closed:
            await send(
                {"type": "http.response.body", "body": b"data: " + _CAPTURE_UNAVAILABLE + b"\n\n", "more_body": True}
            )
        await send({"type": "http.response.body", "body": b"", "more_body": False})


class ReplyTooLarge(Exception):
    """The upstream's reply passed `max_upstream_reply_bytes`: it is not read further."""

    def __init__(self, cap: int) -> None:
        super().__init__(f"upstream reply exceeds the limit of {cap} bytes")


async def read_capped(resp: aiohttp.ClientResponse, cap: int) -> bytes:
    """The reply body, abandoned once it passes `cap` bytes (a huge reply must not stall every tenant)."""
    declared = resp.content_length
    if declared is not None and declared > cap:
        raise ReplyTooLarge(cap)
    parts: list[bytes] = []
    size = 0
    async for chunk in resp.content.iter_any():
        size += len(chunk)
        if size > cap:
            raise ReplyTooLarge(cap)
        parts.append(chunk)
    return b"".join(parts)


def _error_payload(raw: bytes, status: int) -> bytes:
    """An upstream error body, passed through when it is already OpenAI-shaped, else wrapped."""
    try:
        parsed = orjson.loads(raw)
        if isinstance(parsed, dict) and isinstance(parsed.get("error"), dict):
            return raw
    except orjson.JSONDecodeError:
        pass
    text = raw[:2000].decode("utf-8", "replace") or f"upstream answered HTTP {status}"
    return openai_error_body(text, "upstream_error", f"upstream_{status}")


async def _record_handoff(rt: ProxyRuntime, session: Session, agent: str) -> None:
    """A `handoff` step when this call's agent is not the one that made the session's previous call."""
    previous = session.last_agent or session.agent
    session.last_agent = agent
    if previous == agent:
        return
    step = HandoffStep(from_agent=previous, to_agent=agent, agent=previous, metadata={"source": "agent_header"})
    await rt.spool_record(step_record(session, step, time.time()))
