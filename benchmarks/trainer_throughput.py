"""Trainer tokens/s on the embedded model: one job over synthetic multi-token runs, per device and precision.

Each run is one prompt and one completion of random token ids (`--prompt-tokens` + `--completion-tokens`),
so every sequence has the same length; `--sequences` runs, `--batch` sequences per optimizer step (one
micro-batch, no accumulation). Reports the job's own `tokens_per_s` (tokens through forward and backward
per second of training, the proximal-logprob pass included) for each `--precisions` entry.

    .venv/bin/python benchmarks/trainer_throughput.py --device cuda --precisions no,bf16 \\
        --output benchmarks/results/trainer_h100.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def synthetic_runs(count: int, prompt: int, completion: int, vocabulary: int) -> list[Any]:
    from evolvable.protocol.models import ChatMessage, CompletionChoice, LLMCallStep, Signal, Trajectory

    rng = random.Random(0)
    runs = []
    for i in range(count):
        tokens = [rng.randrange(1, vocabulary) for _ in range(completion)]
        step = LLMCallStep(
            prompt_token_ids=[rng.randrange(1, vocabulary) for _ in range(prompt)],
            choices=[
                CompletionChoice(
                    message=ChatMessage(role="assistant", content="x"),
                    completion_token_ids=tokens,
                    logprobs=[-2.0] * completion,
                )
            ],
        )
        runs.append(
            Trajectory(
                status="completed",
                metadata={"cluster": "ab"[i % 2]},
                steps=[step],
                signals=[Signal(kind="outcome", value=float(i % 3 == 0))],
            )
        )
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", help="the trainer's device: auto, cpu or cuda")
    parser.add_argument("--precisions", default="no", help="accelerate mixed precisions to run, e.g. no,bf16")
    parser.add_argument("--sequences", type=int, default=64)
    parser.add_argument("--batch", type=int, default=16, help="sequences per optimizer step")
    parser.add_argument("--prompt-tokens", type=int, default=256)
    parser.add_argument("--completion-tokens", type=int, default=256)
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "trainer_throughput.json")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    import torch
    import transformers
    from accelerate.state import AcceleratorState

    from evolvable.trainer import RLConfig
    from evolvable.trainer.loop import run_training_job

    runs = synthetic_runs(args.sequences, args.prompt_tokens, args.completion_tokens, 49000)
    rows = []
    for precision in args.precisions.split(","):
        AcceleratorState._reset_state(reset_partial_state=True)  # another precision in the same process
        with tempfile.TemporaryDirectory() as scratch:
            config = RLConfig(
                base_model="smollm2-135m",
                device=args.device,
                mixed_precision=precision,
                rollout_batch_size=args.batch,
                micro_batch_size=args.batch,
                grad_accum_steps=1,
                max_seq_len=args.prompt_tokens + args.completion_tokens + 8,
                checkpoint_interval=0,
                progress=False,
                output_dir=str(Path(scratch) / "job"),
            )
            started = time.perf_counter()
            result = run_training_job(config, runs)
            wall = time.perf_counter() - started
        row = {
            "precision": precision,
            "tokens_per_s": round(result.metrics["tokens_per_s"], 1),
            "train_tokens": result.metrics["train_tokens"],
            "optimizer_steps": result.optimizer_steps,
            "job_wall_s": round(wall, 1),
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    result_json = {
        "benchmark": "trainer_throughput",
        "device": args.device,
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "sequences": args.sequences,
        "batch": args.batch,
        "sequence_tokens": args.prompt_tokens + args.completion_tokens,
        "cpu_count": os.cpu_count(),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "platform": platform.platform(),
        "rows": rows,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result_json, indent=2) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
