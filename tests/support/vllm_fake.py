"""A vLLM-shaped server for contract tests: the LoRA endpoints and error bodies of `vllm serve
--enable-lora` with `VLLM_ALLOW_RUNTIME_LORA_UPDATING=True` (vLLM cannot be installed on CPU-only CI).

It answers chat completions with the name of the adapter that served them, so a test can see routing.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route


def _error(message: str, kind: str, code: int) -> JSONResponse:
    return JSONResponse({"object": "error", "message": message, "type": kind, "param": None, "code": code}, code)


def vllm_app(base_model: str, max_lora_rank: int = 16) -> Starlette:
    """`max_lora_rank` is `vllm serve --max-lora-rank`: a larger adapter is refused, as vLLM does."""
    adapters: dict[str, str] = {}

    async def models(_: Request) -> JSONResponse:
        data = [{"id": base_model, "object": "model", "owned_by": "vllm", "root": base_model, "parent": None}]
        data += [
            {"id": n, "object": "model", "owned_by": "vllm", "root": p, "parent": base_model}
            for n, p in adapters.items()
        ]
        return JSONResponse({"object": "list", "data": data})

    async def load(request: Request) -> Any:
        body = await request.json()
        name, path = body.get("lora_name"), body.get("lora_path")
        if not name or not path:
            return _error("Both 'lora_name' and 'lora_path' must be provided.", "InvalidUserInput", 400)
        if name in adapters and not body.get("load_inplace"):
            return _error(f"The lora adapter '{name}' has already been loaded.", "InvalidUserInput", 400)
        config_file = Path(path) / "adapter_config.json"
        if not config_file.is_file():
            return _error(f"Loading lora {name} failed: No adapter found for {path}", "BadRequestError", 400)
        rank = json.loads(config_file.read_text() or "{}").get("r", 0)
        if rank > max_lora_rank:
            message = f"LoRA rank {rank} is greater than max_lora_rank {max_lora_rank}."
            return _error(f"Loading lora {name} failed: {message}", "BadRequestError", 400)
        adapters[name] = path
        from starlette.responses import PlainTextResponse

        return PlainTextResponse(f"Success: LoRA adapter '{name}' added successfully.")

    async def unload(request: Request) -> Any:
        name = (await request.json()).get("lora_name")
        if name not in adapters:
            return _error(f"The lora adapter '{name}' cannot be found.", "NotFoundError", 404)
        del adapters[name]
        from starlette.responses import PlainTextResponse

        return PlainTextResponse(f"Success: LoRA adapter '{name}' removed successfully.")

    async def chat(request: Request) -> JSONResponse:
        body = await request.json()
        model = body.get("model")
        if model != base_model and model not in adapters:
            return _error(f"The model `{model}` does not exist.", "NotFoundError", 404)
        return JSONResponse(
            {
                "id": "chatcmpl-fake",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": f"served by {model}"},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6},
            }
        )

    return Starlette(
        routes=[
            Route("/v1/models", models),
            Route("/v1/load_lora_adapter", load, methods=["POST"]),
            Route("/v1/unload_lora_adapter", unload, methods=["POST"]),
            Route("/v1/chat/completions", chat, methods=["POST"]),
        ]
    )


@contextmanager
def fake_vllm(base_model: str = "base", max_lora_rank: int = 16) -> Iterator[str]:
    """Serve the fake on a free port; yields its base URL (without /v1)."""
    import socket

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(vllm_app(base_model, max_lora_rank), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(5)
