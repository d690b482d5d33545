"""Automatic prefix caching in the embedded policy server: support-desk episodes with the cache on and off.

The same held-out tickets run greedily through the `openai` client against two policy servers (the CLI,
each in its own process): one with the default prefix cache, one started with `--prefix-cache-mb 0`.
Runs alternate (off, on, off, on, ...) so both see the same machine load. Reported per run: wall seconds,
the server's CPU seconds, prompt tokens computed vs taken from the cache, and the success rate (greedy
answers must agree: the cache changes cost, not behaviour).

    .venv/bin/python benchmarks/prefix_cache.py [--tickets 24] [--pairs 2]

Prints a Rich table and writes benchmarks/results/prefix_cache.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from evolvable.policy_server.launcher import policy_server
from evolvable.workloads.support_desk import default_harness, evaluate, generate_tasks

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "prefix_cache.json"
MODEL = "smollm2-135m"


def server_pid(endpoint: str) -> int | None:
    """The policy server's pid, found by its port in /proc (the launcher does not expose its process)."""
    port = endpoint.rsplit(":", 1)[1].split("/")[0]
    inode_of_port = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == int(port) and fields[3] == "0A":
                inode_of_port.add(fields[9])
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            for fd in (proc / "fd").iterdir():
                if fd.readlink().name.removeprefix("socket:[").removesuffix("]") in inode_of_port:
                    return int(proc.name)
        except OSError:
            continue
    return None


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one_run(endpoint: str, tasks: list[Any], concurrency: int) -> dict[str, Any]:
    base = endpoint.removesuffix("/v1")
    pid = server_pid(endpoint)
    before, cpu0 = httpx.get(f"{base}/stats").json(), cpu_seconds(pid) if pid else 0.0
    started = time.perf_counter()
    report = evaluate(tasks, endpoint, MODEL, default_harness(), max_tokens=48, max_turns=3, concurrency=concurrency)
    wall = time.perf_counter() - started
    after, cpu1 = httpx.get(f"{base}/stats").json(), cpu_seconds(pid) if pid else 0.0
    return {
        "wall_s": round(wall, 2),
        "server_cpu_s": round(cpu1 - cpu0, 2) if pid else None,
        "prefill_tokens": after["prefill_tokens"] - before["prefill_tokens"],
        "cached_tokens": after.get("prefix_cached_tokens", 0) - before.get("prefix_cached_tokens", 0),
        "generated_tokens": after["generated_tokens"] - before["generated_tokens"],
        "success_rate": report.success_rate,
        "outputs": [[t.output for t in e.turns] for e in report.episodes],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tickets", type=int, default=24)
    parser.add_argument("--pairs", type=int, default=2, help="alternating off/on run pairs")
    parser.add_argument("--concurrency", type=int, default=24)
    args = parser.parse_args()
    console = Console(width=140)
    tasks = generate_tasks("holdout", args.tickets, seed=11)
    runs: dict[str, list[dict[str, Any]]] = {"off": [], "on": []}
    with (
        policy_server(MODEL, extra_args=("--prefix-cache-mb", "0")) as off,
        policy_server(MODEL) as on,
        Progress(console=console, transient=True) as progress,
    ):
        for endpoint in (off, on):  # warm-up: first-request costs, and the first prompts' states
            evaluate(tasks[:2], endpoint, MODEL, default_harness(), max_tokens=8, max_turns=1)
        bar = progress.add_task("episodes, cache off / on", total=2 * args.pairs)
        for _ in range(args.pairs):
            for name, endpoint in (("off", off), ("on", on)):
                runs[name].append(one_run(endpoint, tasks, args.concurrency))
                progress.advance(bar)

    def median(name: str, key: str) -> float:
        values = [r[key] for r in runs[name] if r[key] is not None]
        return statistics.median(values) if values else float("nan")

    same = all(a["outputs"] == b["outputs"] for a, b in zip(runs["off"], runs["on"], strict=True))
    table = Table(title=f"{args.tickets} support-desk tickets, greedy, concurrency {args.concurrency} (medians)")
    for col in ("prefix cache", "wall s", "server CPU s", "prompt tokens computed", "from cache", "success"):
        table.add_column(col, justify="left" if col == "prefix cache" else "right")
    for name in ("off", "on"):
        table.add_row(
            name,
            f"{median(name, 'wall_s'):.1f}",
            f"{median(name, 'server_cpu_s'):.1f}",
            f"{median(name, 'prefill_tokens'):.0f}",
            f"{median(name, 'cached_tokens'):.0f}",
            f"{median(name, 'success_rate'):.0%}",
        )
    console.print(table)
    ratios = {
        "wall": round(median("on", "wall_s") / median("off", "wall_s"), 3),
        "server_cpu": round(median("on", "server_cpu_s") / median("off", "server_cpu_s"), 3),
    }
    console.print(f"on / off: wall {ratios['wall']:.2f}x, server CPU {ratios['server_cpu']:.2f}x; same answers: {same}")
    for name in runs:
        for r in runs[name]:
            r.pop("outputs")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps({"tickets": args.tickets, "runs": runs, "on_over_off": ratios, "same_answers": same}, indent=2)
        + "\n"
    )
    console.print(f"wrote {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
