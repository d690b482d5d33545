"""A scripted OpenAI-compatible server (aiohttp, free port, own thread) that can also act as an
Evolvable proxy's session API, so the agent loop's exact wire behaviour can be asserted."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

Responder = Callable[[list[dict[str, Any]]], str]


@dataclass
class MockOpenAI:
    responder: Responder
    proxy: bool = False
    chat_requests: list[dict[str, Any]] = field(default_factory=list)
    chat_auth: list[str | None] = field(default_factory=list)
    sessions: dict[str, dict[str, Any]] = field(default_factory=dict)
    base_url: str = ""

    def __post_init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    # ------------------------------------------------------------------ handlers

    async def _chat(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.chat_requests.append(body)
        self.chat_auth.append(request.headers.get("Authorization"))
        text = self.responder(body["messages"])
        return web.json_response(
            {
                "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model", "mock"),
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
            }
        )

    async def _open(self, request: web.Request) -> web.Response:
        if not self.proxy:
            return web.json_response({"error": {"message": "not found", "type": "not_found"}}, status=404)
        body = await request.json()
        sid = f"traj_{uuid.uuid4().hex}"
        key = f"sk-session-{uuid.uuid4().hex[:8]}"
        self.sessions[sid] = {"open": body, "key": key, "auth": request.headers.get("Authorization")}
        self.sessions[sid] |= {"steps": [], "signals": [], "end": None}
        return web.json_response(
            {"id": sid, "api_key": key, "agent": body["agent"], "harness_version": None, "policy_version": "base"},
            status=201,
        )

    async def _session_call(self, request: web.Request) -> web.Response:
        sid, what = request.match_info["sid"], request.match_info["what"]
        if not self.proxy or sid not in self.sessions:
            return web.json_response({"error": {"message": "not found", "type": "not_found"}}, status=404)
        body = await request.json()
        session = self.sessions[sid]
        if what == "steps":
            session["steps"].append(body)
        elif what == "signals":
            session["signals"].extend(body["signals"])
        elif what == "end":
            session["end"] = body
        return web.json_response({"ok": True})

    # ------------------------------------------------------------------ lifecycle

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/sessions", self._open)
        app.router.add_post("/v1/sessions/{sid}/{what}", self._session_call)
        self._runner = web.AppRunner(app, access_log=None)
        self._loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        self._loop.run_until_complete(site.start())
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.base_url = f"http://127.0.0.1:{port}/v1"
        self._ready.set()
        self._loop.run_forever()

    def __enter__(self) -> MockOpenAI:
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
