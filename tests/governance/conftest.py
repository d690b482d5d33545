"""Fixtures for governance tests: a store on each backend."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from evolvable.store import Store


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    s = Store.open(db_url)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture(scope="session")
def smollm2_tokenizer_json(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The embedded model's tokenizer.json: from the model cache (written by the first model load), else
    extracted once from the GGUF inside the installed model package (no weights are loaded)."""
    from evolvable.model_loading import cached_model_dir, gguf_path

    cached = cached_model_dir() / "tokenizer.json"
    if cached.is_file():
        return cached
    from transformers import AutoTokenizer

    source = gguf_path()
    target = tmp_path_factory.mktemp("smollm2-tokenizer")
    AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name).save_pretrained(target)
    return target / "tokenizer.json"
