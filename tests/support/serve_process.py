"""`evolvable serve --config FILE` as a real process, for end-to-end tests that go through the product's
one composition root with no Python wiring of their own."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from evolvable.policy_server.launcher import free_port


@contextmanager
def serve_process(
    config: Path, environment: dict[str, str], log_path: Path, *, start_s: float = 120, stop_s: float = 60
) -> Iterator[str]:
    """Run `serve --config` on a free port until the block ends; yields its /v1 URL once the control API
    answers (401: it is up and requires a key). A process that dies first fails with its log's tail."""
    port = free_port()
    command = [sys.executable, "-m", "evolvable.cli.main", "serve", "--config", str(config), "--port", str(port)]
    with log_path.open("wb") as log:
        proc = subprocess.Popen(command, env=environment, stdout=log, stderr=subprocess.STDOUT)
        base = f"http://127.0.0.1:{port}/v1"
        try:
            deadline = time.monotonic() + start_s
            while True:
                assert proc.poll() is None, log_path.read_text()[-3000:]
                try:
                    if httpx.get(f"{base}/control/status", timeout=2).status_code == 401:
                        break
                except httpx.HTTPError:
                    pass
                assert time.monotonic() < deadline, "serve did not start"
                time.sleep(0.5)
            yield base
        finally:
            proc.terminate()
            proc.wait(stop_s)
