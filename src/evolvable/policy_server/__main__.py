"""`python -m evolvable.policy_server`: the policy server's own process entry (what the launcher spawns).

As an entry point it may set process-wide defaults before torch loads: idle OpenMP threads sleep
instead of spinning (on shared cores spinning threads starve every other process; see
docs/policy_server.md), and the Hugging Face hub is never contacted."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from evolvable.errors import EvolvableError


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m evolvable.policy_server", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m", help="embedded model to serve")
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind")
    parser.add_argument("--port", type=int, default=8500, help="port to bind")
    parser.add_argument("--max-batch", type=int, default=16, help="most sequences decoded together in one step")
    parser.add_argument("--logprobs-mode", default="raw", choices=("raw", "processed"))
    parser.add_argument("--prefix-cache-mb", type=int, default=512, help="memory for repeated prompt prefixes")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or auto (CUDA when a GPU is visible)")
    parser.add_argument("--dtype", default="auto", choices=("auto", "float32", "bfloat16", "float16"))
    parser.add_argument("--lora", action="append", default=[], metavar="NAME=PATH", help="preload an adapter")
    args = parser.parse_args(argv)
    if args.max_batch < 1 or args.prefix_cache_mb < 0:
        parser.error("--max-batch must be >= 1 and --prefix-cache-mb >= 0")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    from evolvable.policy_server.serve import serve

    try:
        serve(
            args.model,
            host=args.host,
            port=args.port,
            max_batch=args.max_batch,
            logprobs_mode=args.logprobs_mode,
            prefix_cache_mb=args.prefix_cache_mb,
            lora=args.lora,
            device=args.device,
            dtype=args.dtype,
            on_loading=lambda model: print(f"loading {model}", file=sys.stderr, flush=True),
            on_serving=lambda line: print(line, file=sys.stderr, flush=True),
        )
    except EvolvableError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
