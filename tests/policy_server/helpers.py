"""Running the policy server in-process on a free port, for tests."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any


@dataclass
class Served:
    engine: Any
    model: Any
    tokenizer: Any
    base_url: str


def logprob_tolerance(model: Any) -> float:
    """How far an incremental decode's logprobs may lie from one full forward's: float32 rounding, or
    bfloat16's 8-bit mantissa when the tests run on a GPU (EVOLVABLE_TEST_DEVICE)."""
    import torch

    return 2e-3 if model.dtype == torch.float32 else 0.1


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def serve(model: Any, tokenizer: Any, max_batch: int = 8) -> Iterator[Served]:
    import uvicorn

    from evolvable.policy_server.app import create_app
    from evolvable.policy_server.engine import Engine

    engine = Engine(model, tokenizer, max_batch=max_batch)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(engine), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the policy server did not start")
        time.sleep(0.05)
    try:
        yield Served(engine, model, tokenizer, f"http://127.0.0.1:{port}")
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        engine.stop()
