"""`evolvable policy-server` as a user starts it."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import httpx
import pytest
from tests.policy_server.helpers import free_port


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    code = "from evolvable.cli.main import main; main()"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)


def test_bad_lora_option_is_a_message_not_a_traceback() -> None:
    result = run_cli("policy-server", "--lora", "no-equals-sign")
    assert result.returncode == 2
    assert "NAME=PATH" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.slow
def test_server_starts_and_answers() -> None:
    port = free_port()
    code = "from evolvable.cli.main import main; main()"
    process = subprocess.Popen(
        [sys.executable, "-c", code, "policy-server", "--port", str(port), "--max-batch", "4"],
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 180
        while True:
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the server did not come up"
            time.sleep(0.5)
        body = {"model": "SmolLM2-135M-Instruct", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}
        response = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=body, timeout=60)
        assert response.status_code == 200 and response.json()["choices"][0]["message"]["role"] == "assistant"
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_bad_device_or_dtype_is_a_message_not_a_traceback() -> None:
    import torch

    result = run_cli("policy-server", "--device", "tpu")
    assert result.returncode == 2
    assert "unknown device 'tpu'" in result.stderr and "Traceback" not in result.stderr
    result = run_cli("policy-server", "--dtype", "int3")
    assert result.returncode == 2 and "unknown dtype 'int3'" in result.stderr
    if not torch.cuda.is_available():
        result = run_cli("policy-server", "--device", "cuda")
        assert result.returncode == 2
        assert "no CUDA GPU is visible" in result.stderr and "Traceback" not in result.stderr
