"""The LoRA hot-loading contract against a vLLM-shaped fake (always) and a real vLLM server when
`EVOLVABLE_TEST_VLLM=<base url>` is set (with `EVOLVABLE_TEST_VLLM_ADAPTER=<PEFT adapter dir the server
can read>` and `EVOLVABLE_TEST_VLLM_MODEL=<served base model name>`; the command line is in docs/training.md)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from tests.support.lora_contract import check_lora_contract
from tests.support.vllm_fake import fake_vllm


@pytest.fixture
def adapter(tmp_path: Path) -> str:
    """A directory shaped like a PEFT adapter (the fake checks only its config; vLLM loads real weights)."""
    (tmp_path / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 8}))
    return str(tmp_path)


def test_contract_against_the_vllm_shaped_fake(adapter: str) -> None:
    with fake_vllm("base") as url:
        check_lora_contract(url, "base", adapter)


@pytest.mark.skipif(not os.environ.get("EVOLVABLE_TEST_VLLM"), reason="set EVOLVABLE_TEST_VLLM to a vLLM server")
def test_contract_against_a_real_vllm() -> None:
    url = os.environ["EVOLVABLE_TEST_VLLM"].removesuffix("/v1")
    check_lora_contract(url, os.environ["EVOLVABLE_TEST_VLLM_MODEL"], os.environ["EVOLVABLE_TEST_VLLM_ADAPTER"])
