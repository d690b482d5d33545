"""LoRA adapters saved by PEFT's `save_pretrained` hot-load, change the output, mix in one batch, and unload."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from tests.policy_server.helpers import Served, serve

pytestmark = pytest.mark.slow

MODEL = "smollm2-135m"
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def adapter_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random-initialised LoRA (non-zero B, so it changes the model) saved the way a trainer saves one."""
    import torch
    from peft import LoraConfig, get_peft_model

    from evolvable.model_loading import load_base_model

    torch.manual_seed(0)
    model, _ = load_base_model()
    config = LoraConfig(r=8, lora_alpha=32, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    peft_model = get_peft_model(model, config)
    path = tmp_path_factory.mktemp("adapter") / "random-lora"
    peft_model.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def lora_served() -> Iterator[Served]:
    """A server over its own model instance: loading adapters injects LoRA layers into the model in place."""
    from evolvable.model_loading import load_base_model

    with serve(*load_base_model()) as running:
        yield running


def greedy(base_url: str, model: str) -> str:
    api = openai.OpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=0)
    response = api.chat.completions.create(model=model, messages=QUESTION, max_tokens=10, temperature=0)
    return response.choices[0].message.content or ""


def test_adapter_loads_changes_output_mixes_and_unloads(lora_served: Served, adapter_dir: Path) -> None:
    url = lora_served.base_url
    base_answer = greedy(url, MODEL)

    loaded = httpx.post(f"{url}/v1/load_lora_adapter", json={"lora_name": "rl-v1", "lora_path": str(adapter_dir)})
    assert loaded.status_code == 200, loaded.text
    again = httpx.post(f"{url}/v1/load_lora_adapter", json={"lora_name": "rl-v1", "lora_path": str(adapter_dir)})
    assert again.status_code == 400
    assert httpx.post(
        f"{url}/v1/load_lora_adapter", json={"lora_name": "rl-v2", "lora_path": str(adapter_dir)}
    ).is_success
    models = [m["id"] for m in httpx.get(f"{url}/v1/models").json()["data"]]
    assert models == [MODEL, "rl-v1", "rl-v2"]

    adapter_answer = greedy(url, "rl-v1")
    assert adapter_answer != base_answer
    assert greedy(url, MODEL) == base_answer  # the base stays the base while adapters are loaded

    async def mixed() -> list[str]:
        api = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
        calls = [
            api.chat.completions.create(model=m, messages=QUESTION, max_tokens=10, temperature=0)
            for m in (MODEL, "rl-v1", MODEL, "rl-v2")
        ]
        return [r.choices[0].message.content or "" for r in await asyncio.gather(*calls)]

    steps_before = lora_served.engine.stats.batched_decode_steps
    assert asyncio.run(mixed()) == [base_answer, adapter_answer, base_answer, adapter_answer]
    assert lora_served.engine.stats.batched_decode_steps > steps_before

    assert httpx.post(f"{url}/v1/unload_lora_adapter", json={"lora_name": "rl-v1"}).status_code == 200
    gone = httpx.post(f"{url}/v1/chat/completions", json={"model": "rl-v1", "messages": QUESTION, "max_tokens": 2})
    assert gone.status_code == 404
    assert greedy(url, "rl-v2") == adapter_answer
    assert httpx.post(f"{url}/v1/unload_lora_adapter", json={"lora_name": "rl-v2"}).status_code == 200
    assert greedy(url, MODEL) == base_answer
    assert [m["id"] for m in httpx.get(f"{url}/v1/models").json()["data"]] == [MODEL]


def test_replacing_an_adapter_in_place(lora_served: Served, adapter_dir: Path) -> None:
    url = lora_served.base_url
    body = {"lora_name": "live", "lora_path": str(adapter_dir)}
    assert httpx.post(f"{url}/v1/load_lora_adapter", json=body).status_code == 200
    assert httpx.post(f"{url}/v1/load_lora_adapter", json={**body, "load_inplace": True}).status_code == 200
    assert greedy(url, "live")
    assert httpx.post(f"{url}/v1/unload_lora_adapter", json={"lora_name": "live"}).status_code == 200


def test_adapter_for_another_base_is_refused(lora_served: Served, tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "adapter_config.json").write_text('{"peft_type": "LORA", "r": 4, "target_modules": ["q_proj"]}')
    no_weights = httpx.post(
        f"{lora_served.base_url}/v1/load_lora_adapter", json={"lora_name": "x", "lora_path": str(broken)}
    )
    assert no_weights.status_code == 400 and "adapter_model" in no_weights.json()["error"]["message"]
    import torch
    from safetensors.torch import save_file

    save_file(
        {"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight": torch.zeros(4, 7)},
        str(broken / "adapter_model.safetensors"),
    )
    response = httpx.post(
        f"{lora_served.base_url}/v1/load_lora_adapter", json={"lora_name": "x", "lora_path": str(broken)}
    )
    assert response.status_code == 400
    assert "x" not in [m["id"] for m in httpx.get(f"{lora_served.base_url}/v1/models").json()["data"]]
    assert greedy(lora_served.base_url, MODEL)  # the base model still serves after a refused load


def test_the_lora_contract_vllm_also_keeps(lora_served: Served, adapter_dir: Path) -> None:
    """The same checks as against vLLM (tests/integration/test_vllm.py): one publish path serves both."""
    from tests.support.lora_contract import check_lora_contract

    check_lora_contract(lora_served.base_url, MODEL, str(adapter_dir))
