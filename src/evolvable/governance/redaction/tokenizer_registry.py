"""Which tokenizer decodes a call's token ids: model name -> tokenizer files on local disk, loaded lazily.

    registry = TokenizerRegistry({"smollm2-135m": model_dir}, fallback="smollm2-135m")
    registry.codec_for("smollm2-135m")       # a TokenCodec, loaded on first use; None if unavailable

Governance never imports the policy server: whoever starts a model (the demo, a deployment's config through
EVOLVABLE_TOKENIZERS="model=path,other=path,*=path") says where its tokenizer lives. `fallback` (`*` in the
setting) serves model names nobody registered, e.g. the LoRA adapters a policy server loads on one base
model. A wrong tokenizer costs data, never privacy: token ids are kept only when they decode to the stored
text. Nothing is ever downloaded.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evolvable.errors import EvolvableError
from evolvable.governance.redaction.token_ids import TokenCodec

log = logging.getLogger("evolvable.governance.redaction")

TokenizerSource = str | Path | Any
"""A directory (with tokenizer.json, else loaded by transformers.AutoTokenizer), a tokenizer.json file, or a
loaded tokenizer (`tokenizers.Tokenizer` or a Hugging Face fast tokenizer)."""

FALLBACK = "*"


class TokenizerRegistry:
    """Model name -> TokenCodec, loaded lazily, once; thread-safe. A source that cannot load is logged once."""

    def __init__(self, sources: Mapping[str, TokenizerSource] | None = None, *, fallback: str | None = None) -> None:
        self._sources: dict[str, TokenizerSource] = dict(sources or {})
        self._codecs: dict[str, TokenCodec | None] = {}
        self._fallback = fallback
        self._lock = threading.Lock()
        if fallback is not None and fallback not in self._sources:
            raise EvolvableError(f"fallback tokenizer {fallback!r} is not registered")

    @classmethod
    def from_spec(cls, spec: str | None) -> TokenizerRegistry:
        """Parses `model=path,model=path,*=path` (the EVOLVABLE_TOKENIZERS setting); `*` names the fallback."""
        sources: dict[str, TokenizerSource] = {}
        for item in (spec or "").split(","):
            if not item.strip():
                continue
            model, sep, path = item.partition("=")
            if not sep or not model.strip() or not path.strip():
                raise EvolvableError(f"tokenizer setting {item.strip()!r} is not of the form model=path")
            sources[model.strip()] = Path(path.strip()).expanduser()
        return cls(sources, fallback=FALLBACK if FALLBACK in sources else None)

    def register(self, model: str, source: TokenizerSource, *, fallback: bool = False) -> None:
        with self._lock:
            self._sources[model] = source
            self._codecs.pop(model, None)
            if fallback:
                self._fallback = model

    def __contains__(self, model: object) -> bool:
        return model in self._sources

    def __bool__(self) -> bool:
        return bool(self._sources)

    def codec_for(self, model: str | None) -> TokenCodec | None:
        """The codec for `model` (or the fallback); None when none is registered or it cannot be loaded."""
        name = model if model in self._sources else self._fallback
        if name is None:
            return None
        with self._lock:
            if name not in self._codecs:
                self._codecs[name] = self._load(name, self._sources[name])
            return self._codecs[name]

    @staticmethod
    def _load(name: str, source: TokenizerSource) -> TokenCodec | None:
        try:
            return TokenCodec(_open(source))
        except Exception as err:  # a missing or unusable tokenizer means dropped ids, never a failed write
            log.warning(
                "tokenizer for %r unavailable (%s: %s); its redacted calls drop token ids",
                name,
                type(err).__name__,
                err,
            )
            return None


def _open(source: TokenizerSource) -> Any:
    if not isinstance(source, str | Path):
        return source
    path = Path(source)
    if path.is_file():
        from tokenizers import Tokenizer

        return Tokenizer.from_file(str(path))
    if (path / "tokenizer.json").is_file():
        from tokenizers import Tokenizer

        return Tokenizer.from_file(str(path / "tokenizer.json"))
    if path.is_dir():
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(path, local_files_only=True)
    raise FileNotFoundError(f"no tokenizer at {path}")


__all__ = ["FALLBACK", "TokenizerRegistry", "TokenizerSource"]
