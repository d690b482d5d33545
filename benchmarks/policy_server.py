"""Generated tokens/s of the embedded policy server under concurrency, versus plain `model.generate`.

Same prompts, same fixed completion length (greedy, EOS ignored so every request generates exactly
`--max-tokens` tokens) for every row:
- `model.generate`, one request at a time (the baseline every ratio is against);
- `model.generate` on static left-padded batches of each `--levels` size (what "collect requests, then
  generate" gives; `x generate` compares each server row with the batch of its own size);
- the policy server over HTTP (its own process, started with the CLI) at each `--levels` concurrency,
  a closed loop of max(`--requests`, concurrency) requests per level through the `openai` client.

    .venv/bin/python benchmarks/policy_server.py [--max-tokens 32] [--requests 16] [--sequential-requests 4]
    .venv/bin/python benchmarks/policy_server.py --device cuda --dtype bfloat16 --levels 1,32,128 \
        --max-batch 128 --requests 256 --max-tokens 128 --output benchmarks/results/policy_server_h100.json

Reports wall-clock tokens/s and tokens per CPU-second of the generating process (the server's CPU
time for HTTP rows, which leaves out the client): on shared cores the second is the steadier
comparison. Writes benchmarks/results/policy_server.json and prints a Rich table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from evolvable.policy_server.launcher import free_port, wait_ready

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_env import LoadMonitor, describe, environment

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "policy_server.json"
MODEL = "smollm2-135m"
TOPICS = [
    "Where is my order A-{i}? It has been a week.",
    "I want a refund for order B-{i}, the item arrived broken.",
    "Please reset the password for customer{i}@example.com.",
    "Change the delivery address of order C-{i} to 12 Main Street.",
]


def prompts(count: int) -> list[list[dict[str, str]]]:
    system = {"role": "system", "content": "You are a helpful customer-support agent. Answer briefly."}
    return [[system, {"role": "user", "content": TOPICS[i % len(TOPICS)].format(i=i)}] for i in range(count)]


def cpu_seconds(pid: int | None = None) -> float:
    """CPU time (user + system, all threads) of this process or of `pid`: a throughput measure that,
    unlike wall time, does not depend on what else the shared cores are running."""
    if pid is None:
        times = os.times()
        return times.user + times.system
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_generate_sequential(model: Any, tokenizer: Any, conversations: list, max_tokens: int) -> dict[str, Any]:
    import torch

    latencies, tokens = [], 0
    started = time.perf_counter()
    for messages in conversations:
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
        ids = ids.to(model.device)
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(**ids, max_new_tokens=max_tokens, min_new_tokens=max_tokens, do_sample=False)
        latencies.append(time.perf_counter() - t0)
        tokens += out.shape[1] - ids["input_ids"].shape[1]
    return summarise("model.generate, one at a time", 1, len(conversations), tokens, started, latencies)


def run_generate_static_batch(
    model: Any, tokenizer: Any, conversations: list, max_tokens: int, batch: int = 8
) -> dict[str, Any]:
    import torch

    tokenizer.padding_side = "left"
    latencies, tokens = [], 0
    started = time.perf_counter()
    for start in range(0, len(conversations), batch):
        group = conversations[start : start + batch]
        texts = [tokenizer.apply_chat_template(m, add_generation_prompt=True, tokenize=False) for m in group]
        encoded = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(**encoded, max_new_tokens=max_tokens, min_new_tokens=max_tokens, do_sample=False)
        latencies += [time.perf_counter() - t0] * len(group)
        tokens += (out.shape[1] - encoded["input_ids"].shape[1]) * len(group)
    synchronize(model)
    return summarise(f"model.generate, static batch of {batch}", batch, len(conversations), tokens, started, latencies)


def synchronize(model: Any) -> None:
    import torch

    if model.device.type == "cuda":
        torch.cuda.synchronize()


async def run_server(base_url: str, conversations: list, max_tokens: int, concurrency: int) -> dict[str, Any]:
    import openai

    client = openai.AsyncOpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=0, timeout=600)
    pending = list(conversations)
    latencies: list[float] = []
    tokens = 0

    async def worker() -> None:
        nonlocal tokens
        while pending:
            messages = pending.pop()
            t0 = time.perf_counter()
            response = await client.chat.completions.create(
                model=MODEL, messages=messages, max_tokens=max_tokens, temperature=0, extra_body={"ignore_eos": True}
            )
            latencies.append(time.perf_counter() - t0)
            tokens += response.usage.completion_tokens

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    await client.close()
    return summarise("policy server (HTTP)", concurrency, len(conversations), tokens, started, latencies)


def summarise(
    mode: str, concurrency: int, requests: int, tokens: int, started: float, latencies: list[float]
) -> dict[str, Any]:
    wall = time.perf_counter() - started
    return {
        "mode": mode,
        "concurrency": concurrency,
        "requests": requests,
        "generated_tokens": tokens,
        "wall_s": round(wall, 2),
        "tokens_per_s": round(tokens / wall, 1),
        "latency_p50_s": round(statistics.median(latencies), 2),
    }


def start_server(port: int, max_batch: int, device: str, dtype: str) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "evolvable.policy_server", "--port", str(port), "--max-batch", str(max_batch)]
    command += ["--device", device, "--dtype", dtype]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def warm_up(model: Any, tokenizer: Any) -> None:
    """One short generate, so the first measured row does not pay one-off start-up costs."""
    import torch

    with torch.inference_mode():
        model.generate(**tokenizer("Hello", return_tensors="pt").to(model.device), max_new_tokens=4, do_sample=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--requests", type=int, default=16, help="requests per level (at least the concurrency)")
    parser.add_argument("--sequential-requests", type=int, default=4, help="requests for the one-at-a-time rows")
    parser.add_argument("--max-batch", type=int, default=32, help="the server's --max-batch")
    parser.add_argument("--levels", default="1,8,32", help="concurrencies (and generate batches)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or auto (the server's and model.generate's)")
    parser.add_argument("--dtype", default="auto", help="auto, float32, bfloat16 or float16")
    parser.add_argument("--output", type=Path, default=RESULTS, help="results JSON")
    args = parser.parse_args()
    levels = [int(level) for level in args.levels.split(",")]
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as the CLI does, before torch loads OpenMP

    import httpx
    from rich.console import Console
    from rich.progress import Progress
    from rich.table import Table

    from evolvable.model_loading import load_base_model, resolve_device, resolve_dtype

    console = Console()
    rows: list[dict[str, Any]] = []
    result: dict[str, Any] = {
        "benchmark": "policy_server",
        "model": MODEL,
        "max_tokens": args.max_tokens,
        "server_max_batch": args.max_batch,
        "device": args.device,
        "dtype": args.dtype,
        "versions": versions(),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "rows": rows,
    }

    def record(row: dict[str, Any], cpu_s: float) -> None:
        """Keep every finished row on disk at once, so a run cut short still leaves its figures."""
        row["cpu_s"] = round(cpu_s, 2)
        row["tokens_per_cpu_s"] = round(row["generated_tokens"] / cpu_s, 2)
        rows.append(row)
        generate = {r["concurrency"]: r for r in rows if r["mode"].startswith("model.generate, static")}
        for item in rows:
            item["ratio_vs_sequential_generate"] = round(item["tokens_per_s"] / rows[0]["tokens_per_s"], 2)
            item["cpu_ratio_vs_sequential_generate"] = round(item["tokens_per_cpu_s"] / rows[0]["tokens_per_cpu_s"], 2)
            same = generate.get(item["concurrency"])
            if item["mode"].startswith("policy server") and same is not None:
                item["ratio_vs_generate_same_batch"] = round(item["tokens_per_s"] / same["tokens_per_s"], 2)
        result["load_average"] = monitor.summary()
        result["environment"] = environment(result["load_average"])
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(result, indent=2) + "\n")
        console.log(f"{row['mode']} c={row['concurrency']}: {row['tokens_per_s']} tokens/s")

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with Progress(console=console) as progress, LoadMonitor() as monitor:
        task = progress.add_task("benchmarking", total=2 + 2 * len(levels))
        device = resolve_device(args.device)
        model, tokenizer = load_base_model(MODEL, dtype=resolve_dtype(args.dtype, device), device=device)
        warm_up(model, tokenizer)
        cpu = cpu_seconds()
        row = run_generate_sequential(model, tokenizer, prompts(args.sequential_requests), args.max_tokens)
        record(row, cpu_seconds() - cpu)
        progress.advance(task)
        for level in levels:
            if level == 1:
                continue
            cpu = cpu_seconds()
            row = run_generate_static_batch(
                model, tokenizer, prompts(max(args.requests, level)), args.max_tokens, level
            )
            record(row, cpu_seconds() - cpu)
            progress.advance(task)
        del model
        if device.type == "cuda":
            import torch

            torch.cuda.empty_cache()
        server = start_server(port, args.max_batch, args.device, args.dtype)  # never competes with the rows above
        try:
            wait_ready(f"{url}/health", 300, server)
            asyncio.run(run_server(url, prompts(2), 4, 1))  # warm-up
            progress.advance(task)
            for concurrency in levels:
                count = args.sequential_requests if concurrency == 1 else max(args.requests, concurrency)
                cpu = cpu_seconds(server.pid)
                row = asyncio.run(run_server(url, prompts(count), args.max_tokens, concurrency))
                record(row, cpu_seconds(server.pid) - cpu)
                progress.advance(task)
            result["server_engine_stats"] = httpx.get(f"{url}/stats").json()
        finally:
            server.terminate()
            server.wait(timeout=30)

    table = Table(title=f"Policy server throughput ({args.max_tokens} generated tokens per request, greedy)")
    columns = (
        "mode",
        "x generate",
        "concurrency",
        "requests",
        "tokens/s",
        "x seq. generate",
        "tokens/CPU-s",
        "x seq. (CPU)",
        "p50 s",
    )
    for column in columns:
        table.add_column(column, justify="left" if column == "mode" else "right")
    for row in rows:
        table.add_row(
            row["mode"],
            f"{row['ratio_vs_generate_same_batch']:.2f}" if "ratio_vs_generate_same_batch" in row else "",
            str(row["concurrency"]),
            str(row["requests"]),
            f"{row['tokens_per_s']:.1f}",
            f"{row['ratio_vs_sequential_generate']:.2f}",
            f"{row['tokens_per_cpu_s']:.2f}",
            f"{row['cpu_ratio_vs_sequential_generate']:.2f}",
            f"{row['latency_p50_s']:.2f}",
        )
    console.print(table)
    console.print(describe(result["load_average"]))
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    console.print(f"wrote {args.output}")


def versions() -> dict[str, str]:
    import torch
    import transformers

    found = {"torch": torch.__version__, "transformers": transformers.__version__}
    if torch.cuda.is_available():
        found["gpu"] = torch.cuda.get_device_name(0)
    return found


if __name__ == "__main__":
    main()
