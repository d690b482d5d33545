"""Serve one embedded model over HTTP until interrupted: what `evolvable policy-server` and
`python -m evolvable.policy_server` both run. It reads no environment and writes none."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

from evolvable.errors import EvolvableError

LOGPROBS_MODES = ("raw", "processed")


def parse_adapters(items: Sequence[str]) -> list[tuple[str, str]]:
    """`NAME=PATH` items as (name, path) pairs; a malformed item is a clear error."""
    adapters = []
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise EvolvableError(f"--lora expects NAME=PATH, got {item!r}")
        adapters.append((name, path))
    return adapters


def serve(
    model: str = "smollm2-135m",
    *,
    host: str = "127.0.0.1",
    port: int = 8500,
    max_batch: int = 16,
    logprobs_mode: str = "raw",
    prefix_cache_mb: int = 512,
    lora: Sequence[str] = (),
    device: str = "cpu",
    dtype: str = "auto",
    on_loading: Callable[[str], None] = lambda _: None,
    on_serving: Callable[[str], None] = lambda _: None,
) -> None:
    """Load `model` (converting it on first use), preload `lora` adapters, and serve until stopped.
    Arguments are checked before torch is imported, so a mistake is reported at once."""
    if logprobs_mode not in LOGPROBS_MODES:
        raise EvolvableError(f"--logprobs-mode must be raw or processed, not {logprobs_mode!r}")
    mode: Literal["raw", "processed"] = "raw" if logprobs_mode == "raw" else "processed"
    adapters = parse_adapters(lora)
    import uvicorn

    from evolvable.model_loading import MODELS, load_base_model, resolve_device, resolve_dtype
    from evolvable.policy_server.app import create_app
    from evolvable.policy_server.engine import Engine

    torch_device = resolve_device(device)  # before the slow load: a missing GPU fails at once
    torch_dtype = resolve_dtype(dtype, torch_device)
    on_loading(model)
    base, tokenizer = load_base_model(model, dtype=torch_dtype, device=torch_device)
    engine = Engine(
        base, tokenizer, model_name=model, max_batch=max_batch, logprobs_mode=mode, prefix_cache_mb=prefix_cache_mb
    )
    for name, path in adapters:
        engine.load_adapter(name, path)
    where = f"{torch_device} {str(torch_dtype).removeprefix('torch.')}"
    on_serving(f"serving {model} on http://{host}:{port}/v1 (max batch {max_batch}, {where})")
    try:
        uvicorn.run(
            create_app(engine, aliases=(MODELS[model].display_name,)), host=host, port=port, log_level="warning"
        )
    finally:
        engine.stop()
