"""Start the policy server (`python -m evolvable.policy_server`, its own entry, not the CLI) as a
subprocess and wait until it answers: one place for the demo, the composition root and the benchmarks.
Its own process, so generation never shares a GIL with the caller; its environment is passed explicitly."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import httpx

from evolvable.errors import EvolvableError


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(url: str, deadline_s: float, proc: subprocess.Popen[bytes] | None = None) -> None:
    """Poll `url` until it answers 200; fail early if `proc` exits."""
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
def policy_server(
    model: str = "smollm2-135m",
    log_path: Path | None = None,
    *,
    max_batch: int = 32,
    startup_s: float = 600.0,
    extra_args: Sequence[str] = (),
) -> Iterator[str]:
    """Start the embedded policy server, yield its /v1 base URL, stop it on exit.

    OMP_WAIT_POLICY=PASSIVE: idle OpenMP threads sleep instead of spinning, which made generation ~30x
    slower when several torch processes shared the cores."""
    port = free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_WAIT_POLICY": "PASSIVE"}
    cmd = [sys.executable, "-m", "evolvable.policy_server", "--model", model, "--port", str(port)]
    cmd += ["--max-batch", str(max_batch), *extra_args]
    log = log_path.open("ab") if log_path is not None else subprocess.DEVNULL
    try:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    finally:
        if not isinstance(log, int):  # (a file we opened, not DEVNULL)
            log.close()
    try:
        endpoint = f"http://127.0.0.1:{port}/v1"
        wait_ready(f"{endpoint}/models", startup_s, proc)
        yield endpoint
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
