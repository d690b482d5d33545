"""`evolvable policy-server`: serve the embedded model over an OpenAI-compatible API."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    app.command("policy-server")(policy_server)


def policy_server(
    model: str = typer.Option("smollm2-135m", "--model", help="Embedded model to serve."),
    host: str = typer.Option("127.0.0.1", "--host", help="Interface to bind."),
    port: int = typer.Option(8500, "--port", help="Port to bind."),
    max_batch: int = typer.Option(16, "--max-batch", min=1, help="Most sequences decoded together in one step."),
    logprobs_mode: str = typer.Option(
        "raw", "--logprobs-mode", help="raw: model logprobs at temperature 1 (default); processed: as sampled."
    ),
    prefix_cache_mb: int = typer.Option(
        512, "--prefix-cache-mb", min=0, help="Memory for reusing the KV states of repeated prompt prefixes (0: off)."
    ),
    device: str = typer.Option(
        "cpu", "--device", help="cpu (default), cuda, cuda:N, or auto (CUDA when a GPU is visible)."
    ),
    dtype: str = typer.Option(
        "auto", "--dtype", help="auto (bfloat16 on a GPU, float32 on CPU), float32, bfloat16 or float16."
    ),
    lora: list[str] = typer.Option(
        [], "--lora", help="Preload a LoRA adapter as NAME=PATH (repeatable); select it with model=NAME."
    ),
) -> None:
    """Serve an embedded model (OpenAI-compatible, vLLM token-id fields, LoRA hot-loading)."""
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    # Before torch loads OpenMP: idle OpenMP threads sleep instead of spinning. On shared cores spinning
    # threads starve every other process (measured: 0.3 -> 10 tokens/s under load); see docs/policy_server.md.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import uvicorn
    from rich.console import Console

    from evolvable.errors import EvolvableError
    from evolvable.model_loading import MODELS, load_base_model, resolve_device, resolve_dtype
    from evolvable.policy_server.app import create_app
    from evolvable.policy_server.engine import Engine

    console = Console(stderr=True)
    if logprobs_mode not in ("raw", "processed"):
        raise EvolvableError(f"--logprobs-mode must be raw or processed, not {logprobs_mode!r}")
    torch_device = resolve_device(device)  # before the slow load: a missing GPU fails at once
    torch_dtype = resolve_dtype(dtype, torch_device)
    adapters = []
    for item in lora:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise EvolvableError(f"--lora expects NAME=PATH, got {item!r}")
        adapters.append((name, path))
    with console.status(f"loading {model} (the first run converts the GGUF weights, ~30 s)"):
        base, tokenizer = load_base_model(model, dtype=torch_dtype, device=torch_device)
    engine = Engine(
        base,
        tokenizer,
        model_name=model,
        max_batch=max_batch,
        logprobs_mode=logprobs_mode,  # type: ignore[arg-type]
        prefix_cache_mb=prefix_cache_mb,
    )
    for name, path in adapters:
        engine.load_adapter(name, path)
    where = f"{torch_device} {str(torch_dtype).removeprefix('torch.')}"
    console.print(f"serving [bold]{model}[/] on http://{host}:{port}/v1 (max batch {max_batch}, {where})")
    try:
        uvicorn.run(
            create_app(engine, aliases=(MODELS[model].display_name,)), host=host, port=port, log_level="warning"
        )
    finally:
        engine.stop()
