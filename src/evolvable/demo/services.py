"""The processes the demo runs: the embedded policy server (a subprocess) and the proxy (in-process).

The policy server gets its own process so generation and the proxy never share a GIL. The proxy
runs in this process on a uvicorn thread so the control plane the demo drives and the harness
router the proxy consults are the same objects.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from evolvable.errors import EvolvableError


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_ready(url: str, deadline_s: float, proc: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise EvolvableError(f"the policy server exited with code {proc.returncode}; see its log")
        try:
            if httpx.get(url, timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise EvolvableError(f"{url} did not become ready within {deadline_s:.0f} s")


@contextmanager
def policy_server(model: str, log_path: Path, *, max_batch: int = 32, startup_s: float = 600.0) -> Iterator[str]:
    """Start `evolvable policy-server` and yield its /v1 base URL; stop it on exit."""
    port = free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_WAIT_POLICY": "PASSIVE"}
    cmd = [sys.executable, "-m", "evolvable.cli.main", "policy-server", "--model", model, "--port", str(port)]
    cmd += ["--max-batch", str(max_batch)]
    with log_path.open("ab") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        endpoint = f"http://127.0.0.1:{port}/v1"
        _wait_ready(f"{endpoint}/models", startup_s, proc)
        yield endpoint
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


class ProxyServer:
    """The proxy app on a uvicorn thread; `url` is its /v1 base URL."""

    def __init__(self, app: Any) -> None:
        import uvicorn

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning", access_log=False)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="evolvable-proxy", daemon=True)

    def __enter__(self) -> ProxyServer:
        self.thread.start()
        _wait_ready(f"{self.url}/models", 60.0)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)

    def flush(self) -> None:
        """Wait until everything the proxy captured so far is in the store (listing reads its own writes)."""
        httpx.get(f"{self.url}/trajectories", params={"limit": 1}, timeout=60.0).raise_for_status()
