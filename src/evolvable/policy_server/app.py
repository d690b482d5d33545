"""The OpenAI-compatible HTTP API over the engine, with vLLM's field names and LoRA endpoints.

- `POST /v1/chat/completions`, `POST /v1/completions` (streaming and not, `n`, seeds, stops);
  `return_token_ids: true` adds `prompt_token_ids` and `choices[i].token_ids` (per delta when streaming);
  `logprobs` adds per-token logprobs of the raw model distribution (temperature 1, before top-p);
  `tools` / `tool_choice` are rendered and tool calls parsed into `tool_calls` (see `tools.py`).
- `GET /v1/models`: the base model and every loaded adapter.
- `POST /v1/load_lora_adapter {lora_name, lora_path}`, `POST /v1/unload_lora_adapter {lora_name}`.
- `GET /health`, `GET /stats` (engine counters), `GET /metrics` (Prometheus).
Errors are OpenAI-style `{"error": {"message", "type", "code"}}` bodies with a 4xx status.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import asdict, replace
from typing import Any

import orjson
from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import PlainTextResponse, Response, StreamingResponse
from pydantic import ValidationError

from evolvable.errors import HTTPError, InvalidRequest
from evolvable.http_errors import install_error_handler
from evolvable.policy_server.engine import UNKNOWN_ADAPTER, Engine, GenerationResult, StepUpdate
from evolvable.policy_server.metrics import EngineCollector
from evolvable.policy_server.schemas import (
    ChatCompletionRequest,
    CompletionRequest,
    LoadLoraAdapterRequest,
    UnloadLoraAdapterRequest,
)
from evolvable.policy_server.tools import (
    CLOSE,
    ToolCallStream,
    ToolChoice,
    ToolOutputError,
    parse_answer,
    render_messages,
    resolve_tool_choice,
)
from evolvable.telemetry.metrics import CONTENT_TYPE, POLICY_REGISTRY, exposition

__all__ = ["create_app"]


def _json(body: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type="application/json")


def _server_shape(err: HTTPError) -> bytes:
    """OpenAI's error shape as vLLM's server writes it: `code` defaults to the HTTP status."""
    return orjson.dumps(
        {"error": {"message": err.message, "type": err.error_type, "param": err.param, "code": err.code or err.status}}
    )


def _validation_message(err: ValidationError | RequestValidationError) -> str:
    parts = []
    for item in err.errors():
        location = ".".join(str(p) for p in item.get("loc", ()) if p != "body")
        parts.append(f"{location}: {item.get('msg')}" if location else str(item.get("msg")))
    return "; ".join(parts) or "invalid request"


def create_app(engine: Engine, *, aliases: tuple[str, ...] = ()) -> FastAPI:
    """The ASGI app serving `engine`. The app's lifespan starts the engine thread; the caller stops it.
    `aliases` are extra model names that select the base model (for example its display name)."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        engine.start()
        yield

    app = FastAPI(title="Evolvable policy server", lifespan=lifespan, docs_url=None, redoc_url=None)
    install_error_handler(
        app,
        render=_server_shape,
        invalid=lambda err: InvalidRequest(_validation_message(err)),
        translate=lambda err: InvalidRequest(str(err)),  # any other error of ours is the request's fault
    )
    app.include_router(_server_router(engine))
    app.include_router(_generation_router(engine, _Models(engine, aliases)))
    return app


async def _parse(request: Request, model: type[Any]) -> Any:
    """The body as `model`, or a 400 that says what is wrong with it."""
    try:
        body = orjson.loads(await request.body())
    except orjson.JSONDecodeError as err:
        raise InvalidRequest(f"the body is not valid JSON: {err}") from err
    if not isinstance(body, dict):
        raise InvalidRequest("the body must be a JSON object")
    try:
        return model.model_validate(body)
    except ValidationError as err:
        raise InvalidRequest(_validation_message(err)) from err


class _Models:
    """The names a request may ask for: the base model (and its aliases) or a loaded adapter."""

    def __init__(self, engine: Engine, aliases: tuple[str, ...]) -> None:
        self.engine = engine
        self.base_names = {engine.model_name, *aliases}

    def adapter_of(self, model: str) -> str | None:
        """The adapter serving `model`; None for the base model."""
        if model in self.base_names:
            return None
        if model in self.engine.adapters:
            return model
        raise HTTPError(
            f"The model `{model}` does not exist.", status=404, error_type="NotFoundError", code="model_not_found"
        )


def _server_router(engine: Engine) -> APIRouter:
    """Health, metrics, statistics, the model list and LoRA hot-loading."""
    router = APIRouter()

    @router.get("/health")
    async def health() -> Response:
        return _json({"status": "ok", "model": engine.model_name, "adapters": sorted(engine.adapters)})

    metrics_collector = EngineCollector(engine)

    @router.get("/metrics", include_in_schema=False)
    async def metrics() -> Response:
        body = exposition([POLICY_REGISTRY], [metrics_collector])
        return Response(body, media_type=CONTENT_TYPE)

    @router.get("/stats")
    async def stats() -> Response:
        return _json(asdict(engine.stats))

    @router.get("/v1/models")
    async def models() -> Response:
        created = int(time.time())
        data = [
            {
                "id": engine.model_name,
                "object": "model",
                "created": created,
                "owned_by": "evolvable",
                "root": engine.model_name,
                "parent": None,
            }
        ]
        for name, path in sorted(engine.adapters.items()):
            data.append(
                {
                    "id": name,
                    "object": "model",
                    "created": created,
                    "owned_by": "evolvable",
                    "root": path,
                    "parent": engine.model_name,
                }
            )
        return _json({"object": "list", "data": data})

    @router.post("/v1/load_lora_adapter")
    async def load_lora_adapter(request: Request) -> Response:
        body: LoadLoraAdapterRequest = await _parse(request, LoadLoraAdapterRequest)
        await engine.aload_adapter(body.lora_name, body.lora_path, replace=body.load_inplace)
        return PlainTextResponse(f"Success: LoRA adapter '{body.lora_name}' added successfully.")

    @router.post("/v1/unload_lora_adapter")
    async def unload_lora_adapter(request: Request) -> Response:
        body: UnloadLoraAdapterRequest = await _parse(request, UnloadLoraAdapterRequest)
        await engine.aunload_adapter(body.lora_name)
        return PlainTextResponse(f"Success: LoRA adapter '{body.lora_name}' removed successfully.")

    return router


def _generation_router(engine: Engine, models: _Models) -> APIRouter:
    """Chat and text completions (plain and streamed), with vLLM's token-id fields and tool calls."""
    router = APIRouter()
    template_renders_tools = "tools" in str(getattr(engine.tokenizer, "chat_template", None) or "")

    @router.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        body: ChatCompletionRequest = await _parse(request, ChatCompletionRequest)
        adapter = models.adapter_of(body.model)
        tool_choice = _tool_choice(body)
        messages = [_normalise_message(m) for m in body.messages]
        template_tools = body.tools if tool_choice.active and template_renders_tools else None
        if not template_renders_tools:
            messages = render_messages(messages, body.tools, tool_choice)
        prompt_ids = await asyncio.to_thread(
            engine.chat_prompt_ids,
            messages,
            template_tools,
            add_generation_prompt=body.add_generation_prompt,
            continue_final_message=body.continue_final_message,
        )
        if tool_choice.prefill:  # the answer starts inside a call: part of the prompt, not of the completion
            prompt_ids = prompt_ids + engine.text_prompt_ids(tool_choice.prefill)
        engine.check_request(prompt_ids, adapter)
        top = (body.top_logprobs or 0) if body.logprobs else 0
        params = [body.sampling_params(i, top, body.effective_max_tokens) for i in range(body.n)]
        if tool_choice.stops_after_one_call:
            params = [replace(p, stop=[*p.stop, CLOSE]) for p in params]
        meta = _Meta("chatcmpl", body.model)
        if body.stream:
            streams = [engine.stream(prompt_ids, p, adapter) for p in params]
            return _sse(_chat_chunks(engine, body, meta, prompt_ids, streams, tool_choice))
        results = await asyncio.gather(*(engine.generate(prompt_ids, p, adapter) for p in params))
        _raise_for_failures(results)
        choices = []
        for index, result in enumerate(results):
            message, finish_reason = _chat_message(result.text, result.finish_reason, tool_choice)
            choice: dict[str, Any] = {
                "index": index,
                "message": message,
                "logprobs": _chat_logprobs(engine, result.token_ids, result.logprobs, result.top_logprobs, top)
                if body.logprobs
                else None,
                "finish_reason": finish_reason,
            }
            if body.return_token_ids:
                choice["token_ids"] = result.token_ids
            choices.append(choice)
        response = meta.envelope("chat.completion", choices, _usage(prompt_ids, results))
        if body.return_token_ids:
            response["prompt_token_ids"] = prompt_ids
        return _json(response)

    @router.post("/v1/completions")
    async def completions(request: Request) -> Response:
        body: CompletionRequest = await _parse(request, CompletionRequest)
        adapter = models.adapter_of(body.model)
        if body.echo:
            raise InvalidRequest("echo is not supported by this server")
        try:
            prompts = body.prompts()
        except ValueError as err:
            raise InvalidRequest(str(err)) from err
        prompt_ids = [p if isinstance(p, list) else engine.text_prompt_ids(p) for p in prompts]
        for ids in prompt_ids:
            engine.check_request(ids, adapter)
        top = body.logprobs or 0
        jobs = [(ids, body.sampling_params(i, top, body.max_tokens)) for ids in prompt_ids for i in range(body.n)]
        meta = _Meta("cmpl", body.model)
        if body.stream:
            streams = [engine.stream(ids, p, adapter) for ids, p in jobs]
            return _sse(_completion_chunks(engine, body, meta, [ids for ids, _ in jobs], streams))
        results = await asyncio.gather(*(engine.generate(ids, p, adapter) for ids, p in jobs))
        _raise_for_failures(results)
        choices = []
        for index, result in enumerate(results):
            choice = _text_choice(engine, body, index, result.text, result, result.finish_reason)
            if body.return_token_ids:
                choice["prompt_token_ids"] = result.prompt_token_ids
                choice["token_ids"] = result.token_ids
            choices.append(choice)
        usage = {
            "prompt_tokens": sum(len(ids) for ids, _ in jobs[:: body.n]),
            "completion_tokens": sum(len(r.token_ids) for r in results),
        }
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        return _json(meta.envelope("text_completion", choices, usage))

    return router


class _Meta:
    def __init__(self, prefix: str, model: str) -> None:
        self.id = f"{prefix}-{uuid.uuid4().hex}"
        self.model = model
        self.created = int(time.time())

    def envelope(self, kind: str, choices: list[dict[str, Any]], usage: dict[str, int] | None) -> dict[str, Any]:
        body: dict[str, Any] = {"id": self.id, "object": kind, "created": self.created, "model": self.model}
        body["choices"] = choices
        if usage is not None or not kind.endswith("chunk"):
            body["usage"] = usage
        return body


def _normalise_message(message: dict[str, Any]) -> dict[str, Any]:
    """Flatten OpenAI content parts to text and None content to "", which plain chat templates expect."""
    if "role" not in message:
        raise InvalidRequest("every message needs a role")
    content = message.get("content")
    if isinstance(content, list):
        text = "".join(part.get("text", "") for part in content if isinstance(part, dict))
        return {**message, "content": text}
    if content is None:
        return {**message, "content": ""}
    return message


def _tool_choice(body: ChatCompletionRequest) -> ToolChoice:
    """The request's tools and tool_choice, checked; legacy `functions` are refused rather than ignored."""
    if body.model_extra and {"functions", "function_call"} & body.model_extra.keys():
        raise InvalidRequest("`functions` and `function_call` are not supported; send `tools` and `tool_choice`")
    choice = resolve_tool_choice(body.tools, body.tool_choice, body.parallel_tool_calls)
    if choice.prefill and (body.continue_final_message or not body.add_generation_prompt):
        raise InvalidRequest(f"tool_choice {choice.mode!r} starts a new assistant turn; it cannot continue one")
    return choice


def _chat_message(text: str, finish_reason: str | None, choice: ToolChoice) -> tuple[dict[str, Any], str | None]:
    """The assistant message of a whole answer, with tool calls parsed out when tools are in play."""
    if not choice.active:
        return {"role": "assistant", "content": text}, finish_reason
    parsed = parse_answer(text, choice)
    message: dict[str, Any] = {"role": "assistant", "content": parsed.content}
    if not parsed.tool_calls:
        return message, finish_reason
    message["tool_calls"] = parsed.tool_calls
    return message, "tool_calls"


def _raise_for_failures(results: list[GenerationResult]) -> None:
    if any(r.finish_reason == UNKNOWN_ADAPTER for r in results):
        raise HTTPError(
            "the adapter was unloaded before this request started",
            status=404,
            error_type="NotFoundError",
            code="model_not_found",
        )
    if any(r.finish_reason in ("error", "abort") for r in results):
        raise HTTPError("generation failed inside the engine; see the server log", status=500, code="engine_error")


def _usage(prompt_ids: list[int], results: list[GenerationResult]) -> dict[str, int]:
    completion = sum(len(r.token_ids) for r in results)
    return {
        "prompt_tokens": len(prompt_ids),
        "completion_tokens": completion,
        "total_tokens": len(prompt_ids) + completion,
    }


def _chat_logprobs(
    engine: Engine, token_ids: list[int], logprobs: list[float], tops: list[list[tuple[int, float]]], top: int
) -> dict[str, Any]:
    content = []
    for token, logprob, alternatives in zip(token_ids, logprobs, tops, strict=True):
        text, raw = engine.token_text(token)
        entry: dict[str, Any] = {"token": text, "logprob": logprob, "bytes": raw, "top_logprobs": []}
        if top:
            entry["top_logprobs"] = [
                {"token": engine.token_text(t)[0], "logprob": lp, "bytes": engine.token_text(t)[1]}
                for t, lp in alternatives
            ]
        content.append(entry)
    return {"content": content}


def _completion_logprobs(
    engine: Engine, token_ids: list[int], logprobs: list[float], tops: list[list[tuple[int, float]]]
) -> dict[str, Any]:
    tokens = [engine.token_text(t)[0] for t in token_ids]
    offsets, position = [], 0
    for token in tokens:
        offsets.append(position)
        position += len(token)
    return {
        "tokens": tokens,
        "token_logprobs": logprobs,
        "top_logprobs": [{engine.token_text(t)[0]: lp for t, lp in alternatives} or None for alternatives in tops],
        "text_offset": offsets,
    }


def _sse(chunks: AsyncIterator[dict[str, Any] | str]) -> StreamingResponse:
    async def encode() -> AsyncIterator[bytes]:
        async for chunk in chunks:
            payload = chunk.encode() if isinstance(chunk, str) else orjson.dumps(chunk)
            yield b"data: " + payload + b"\n\n"

    return StreamingResponse(encode(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


async def _merge(streams: list[AsyncIterator[StepUpdate]]) -> AsyncIterator[tuple[int, StepUpdate]]:
    """Interleave the update streams of several choices as they arrive."""
    merged: asyncio.Queue[tuple[int, StepUpdate | None]] = asyncio.Queue()

    async def pump(index: int, stream: AsyncIterator[StepUpdate]) -> None:
        try:
            async for update in stream:
                await merged.put((index, update))
        finally:
            await merged.put((index, None))

    tasks = [asyncio.create_task(pump(i, s)) for i, s in enumerate(streams)]
    remaining = len(tasks)
    try:
        while remaining:
            index, update = await merged.get()
            if update is None:
                remaining -= 1
            else:
                yield index, update
    finally:
        for task in tasks:
            task.cancel()


async def _chat_chunks(
    engine: Engine,
    body: ChatCompletionRequest,
    meta: _Meta,
    prompt_ids: list[int],
    streams: list[AsyncIterator[StepUpdate]],
    tool_choice: ToolChoice,
) -> AsyncIterator[dict[str, Any] | str]:
    top = (body.top_logprobs or 0) if body.logprobs else 0
    completion_tokens = 0
    parsers = [ToolCallStream(tool_choice) for _ in range(body.n)]
    for index in range(body.n):
        first: dict[str, Any] = {
            "index": index,
            "delta": {"role": "assistant", "content": ""},
            "logprobs": None,
            "finish_reason": None,
        }
        chunk = meta.envelope("chat.completion.chunk", [first], None)
        if body.return_token_ids:
            chunk["prompt_token_ids"] = prompt_ids
        yield chunk
    async for index, update in _merge(streams):
        completion_tokens += len(update.token_ids)
        if update.finish_reason in ("error", "abort", UNKNOWN_ADAPTER):
            yield {"error": {"message": "generation failed inside the engine", "type": "server_error", "code": 500}}
            return
        try:
            deltas, finish_reason = _stream_deltas(update, parsers[index] if tool_choice.active else None)
        except ToolOutputError as err:
            yield {"error": {"message": str(err), "type": "server_error", "code": "tool_call_parse_error"}}
            return
        logprobs = (
            _chat_logprobs(engine, update.token_ids, update.logprobs, update.top_logprobs, top)
            if body.logprobs
            else None
        )
        for position, delta in enumerate(deltas):  # token ids and logprobs ride on the first chunk of the update
            choice: dict[str, Any] = {
                "index": index,
                "delta": delta,
                "logprobs": logprobs if position == 0 else None,
                "finish_reason": finish_reason if position == len(deltas) - 1 else None,
            }
            if body.return_token_ids:
                choice["token_ids"] = update.token_ids if position == 0 else []
            yield meta.envelope("chat.completion.chunk", [choice], None)
    if body.include_usage:
        usage = {"prompt_tokens": len(prompt_ids), "completion_tokens": completion_tokens}
        usage["total_tokens"] = usage["prompt_tokens"] + completion_tokens
        yield {**meta.envelope("chat.completion.chunk", [], None), "usage": usage}
    yield "[DONE]"


def _stream_deltas(update: StepUpdate, parser: ToolCallStream | None) -> tuple[list[dict[str, Any]], str | None]:
    """The chat deltas of one engine update (at least one), and the finish reason to send with the last."""
    if parser is None:
        return [{"content": update.text_delta} if update.text_delta or update.finish_reason is None else {}], (
            update.finish_reason
        )
    deltas = parser.feed(update.text_delta)
    if update.finish_reason is None:
        return deltas or [{}], None
    deltas += parser.finish()
    return deltas or [{}], "tool_calls" if parser.calls else update.finish_reason


def _text_choice(
    engine: Engine, body: CompletionRequest, index: int, text: str, tokens: Any, finish_reason: str | None
) -> dict[str, Any]:
    """One /v1/completions choice (whole or a stream delta); `tokens` has token_ids, logprobs, top_logprobs."""
    logprobs = None
    if body.logprobs is not None:
        logprobs = _completion_logprobs(engine, tokens.token_ids, tokens.logprobs, tokens.top_logprobs)
    return {"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish_reason}


async def _completion_chunks(
    engine: Engine,
    body: CompletionRequest,
    meta: _Meta,
    prompt_ids: list[list[int]],
    streams: list[AsyncIterator[StepUpdate]],
) -> AsyncIterator[dict[str, Any] | str]:
    completion_tokens = 0
    sent_prompt: set[int] = set()
    async for index, update in _merge(streams):
        completion_tokens += len(update.token_ids)
        if update.finish_reason in ("error", "abort", UNKNOWN_ADAPTER):
            yield {"error": {"message": "generation failed inside the engine", "type": "server_error", "code": 500}}
            return
        choice = _text_choice(engine, body, index, update.text_delta, update, update.finish_reason)
        if body.return_token_ids:
            choice["token_ids"] = update.token_ids
            if index not in sent_prompt:
                choice["prompt_token_ids"] = prompt_ids[index]
                sent_prompt.add(index)
        yield meta.envelope("text_completion", [choice], None)
    if body.include_usage:
        usage = {"prompt_tokens": sum(len(p) for p in prompt_ids[:: body.n]), "completion_tokens": completion_tokens}
        usage["total_tokens"] = usage["prompt_tokens"] + completion_tokens
        yield {**meta.envelope("text_completion", [], None), "usage": usage}
    yield "[DONE]"
