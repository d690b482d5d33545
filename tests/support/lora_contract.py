"""What Evolvable needs from a serving engine's LoRA API, checked the same way against the vLLM-shaped
fake (CI), a real vLLM (`EVOLVABLE_TEST_VLLM`) and the embedded policy server."""

from __future__ import annotations

import httpx
import pytest

from evolvable.errors import UpstreamError
from evolvable.trainer.publish import load_lora, unload_lora


def check_lora_contract(base_url: str, base_model: str, adapter_path: str, name: str = "evolvable-contract") -> None:
    v1 = base_url.rstrip("/") + "/v1"
    load_lora(base_url, name, adapter_path)
    assert name in [m["id"] for m in httpx.get(f"{v1}/models", timeout=30).json()["data"]]
    reply = httpx.post(
        f"{v1}/chat/completions",
        json={"model": name, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "temperature": 0},
        timeout=120,
    )
    assert reply.status_code == 200, reply.text
    with pytest.raises(UpstreamError, match="refused adapter") as twice:
        load_lora(base_url, name, adapter_path)  # loading a name twice is refused, not silently replaced
    assert twice.value.status_code == 400
    with pytest.raises(UpstreamError, match="refused adapter"):
        load_lora(base_url, name + "-missing", adapter_path + "-does-not-exist")
    unload_lora(base_url, name)
    gone = httpx.post(
        f"{v1}/chat/completions", json={"model": name, "messages": [{"role": "user", "content": "hi"}]}, timeout=30
    )
    assert gone.status_code == 404
    assert base_model in [m["id"] for m in httpx.get(f"{v1}/models", timeout=30).json()["data"]]
    with pytest.raises(UpstreamError):
        unload_lora(base_url, name)
