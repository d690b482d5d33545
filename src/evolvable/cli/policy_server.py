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

    # An entry point's process-wide defaults, before torch loads OpenMP: idle OpenMP threads sleep instead
    # of spinning. On shared cores spinning threads starve every other process (measured: 0.3 -> 10
    # tokens/s under load); see docs/policy_server.md.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    from rich.console import Console

    from evolvable.policy_server.serve import serve

    console = Console(stderr=True)
    serve(
        model,
        host=host,
        port=port,
        device=device,
        dtype=dtype,
        max_batch=max_batch,
        logprobs_mode=logprobs_mode,
        prefix_cache_mb=prefix_cache_mb,
        lora=lora,
        on_loading=lambda name: console.print(f"loading {name} (the first run converts the GGUF weights, ~30 s)"),
        on_serving=console.print,
    )
