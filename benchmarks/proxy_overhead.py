"""Latency the proxy adds, side by side in one run: direct to a fast mock upstream, a bare aiohttp
pass-through (the floor), Evolvable with capture on, and the LiteLLM proxy.

Each server and the load generator run in their own processes (all on the same cores, as in a
single-box deployment). For every target, concurrency 1/16/64, streaming and not, the load generator
runs a closed loop for a fixed time and reports p50/p95/p99 latency (time to last byte; for streams
also time to first byte) and requests/s. "Added" = target minus direct, per percentile.

    benchmarks/setup_litellm.sh          # once: LiteLLM into .venv-bench-litellm (optional peer)
    .venv/bin/python benchmarks/proxy_overhead.py [--duration 3] [--skip-litellm]

Writes benchmarks/results/proxy_overhead.json and prints a Rich table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "proxy_overhead.json"
LITELLM_BIN = ROOT / ".venv-bench-litellm" / "bin" / "litellm"
MASTER_KEY = "sk-bench-master"
REQUEST = {
    "model": "mock",
    "messages": [
        {"role": "system", "content": "You are a support agent for an online shop. Answer briefly."},
        {"role": "user", "content": "Where is my order A-1? I ordered it last week and have not heard back."},
    ],
    "temperature": 0.2,
    "max_tokens": 64,
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 120, headers: dict | None = None) -> None:
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: server exited with {proc.returncode}")
        try:
            if httpx.get(url, timeout=2, headers=headers).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} not ready after {timeout_s}s")


# --------------------------------------------------------------------------- bare pass-through (the floor)


def run_bare(port: int, upstream: str) -> None:
    """The least a Python proxy can do: aiohttp server + pooled aiohttp client, bytes through, no capture."""
    import aiohttp
    import uvloop
    from aiohttp import web

    async def main() -> None:
        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=512), auto_decompress=False)

        async def handle(request: web.Request) -> web.StreamResponse:
            body = await request.read()
            async with session.post(
                upstream + "/chat/completions", data=body, headers={"Content-Type": "application/json"}
            ) as up:
                if up.content_type == "text/event-stream":
                    resp = web.StreamResponse(status=up.status, headers={"Content-Type": "text/event-stream"})
                    await resp.prepare(request)
                    async for chunk in up.content.iter_any():
                        await resp.write(chunk)
                    await resp.write_eof()
                    return resp
                return web.Response(body=await up.read(), status=up.status, content_type="application/json")

        async def models(request: web.Request) -> web.Response:
            return web.json_response({"data": []})

        app = web.Application()
        app.router.add_post("/v1/chat/completions", handle)
        app.router.add_get("/v1/models", models)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        await asyncio.Event().wait()

    uvloop.run(main())


# --------------------------------------------------------------------------- load generator


def run_load(
    url: str, concurrency: int, duration_s: float, stream: bool, warmup_s: float, auth: str | None, out_path: str
) -> None:
    import aiohttp
    import uvloop

    body = json.dumps({**REQUEST, "stream": stream}).encode()
    headers = {"Content-Type": "application/json"}
    if auth:
        headers["Authorization"] = f"Bearer {auth}"

    async def main() -> dict[str, Any]:
        ttlb: list[float] = []
        ttfb: list[float] = []
        overheads: list[float] = []
        errors = 0
        connector = aiohttp.TCPConnector(limit=concurrency + 4)
        async with aiohttp.ClientSession(connector=connector) as session:
            start = time.perf_counter()
            measure_from = start + warmup_s
            stop_at = measure_from + duration_s

            async def worker() -> None:
                nonlocal errors
                while True:
                    t0 = time.perf_counter()
                    if t0 >= stop_at:
                        return
                    try:
                        async with session.post(url, data=body, headers=headers) as r:
                            first = None
                            async for _chunk in r.content.iter_any():
                                if first is None:
                                    first = time.perf_counter()
                            t1 = time.perf_counter()
                            ok = r.status == 200
                            oh = r.headers.get("x-evolvable-overhead-ms")
                    except aiohttp.ClientError:
                        ok, first, t1, oh = False, None, time.perf_counter(), None
                    if t0 >= measure_from:
                        if not ok:
                            errors += 1
                            continue
                        ttlb.append((t1 - t0) * 1000)
                        ttfb.append(((first or t1) - t0) * 1000)
                        if oh is not None:
                            overheads.append(float(oh))

            await asyncio.gather(*(worker() for _ in range(concurrency)))
            elapsed = time.perf_counter() - measure_from
        return {"ttlb": ttlb, "ttfb": ttfb, "errors": errors, "elapsed_s": elapsed, "overhead_header": overheads}

    raw = uvloop.run(main())
    n = len(raw["ttlb"])
    summary: dict[str, Any] = {"n": n, "errors": raw["errors"], "rps": n / raw["elapsed_s"] if raw["elapsed_s"] else 0}
    for name in ("ttlb", "ttfb"):
        for q in (50, 95, 99):
            summary[f"{name}_p{q}"] = pct(raw[name], q)
    if raw["overhead_header"]:
        summary["overhead_header_p50"] = statistics.median(raw["overhead_header"])
        summary["overhead_header_p99"] = pct(raw["overhead_header"], 99)
    Path(out_path).write_text(json.dumps(summary))


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def measure(url: str, concurrency: int, stream: bool, duration_s: float, auth: str | None = None) -> dict[str, Any]:
    cmd = [
        sys.executable,
        __file__,
        "load",
        "--url",
        url,
        "--concurrency",
        str(concurrency),
        "--duration",
        str(duration_s),
        "--warmup",
        "0.5",
    ]
    if stream:
        cmd.append("--stream")
    if auth:
        cmd += ["--auth", auth]
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        subprocess.run([*cmd, "--out", out.name], capture_output=True, timeout=duration_s * 10 + 60, check=True)
        return json.loads(Path(out.name).read_text())


# --------------------------------------------------------------------------- orchestration


class Servers:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(
        self,
        cmd: list[str],
        ready_url: str,
        env: dict[str, str] | None = None,
        headers: dict | None = None,
        log: str = "server",
    ) -> subprocess.Popen[bytes]:
        logfile = open(self.workdir / f"{log}.log", "wb")  # noqa: SIM115
        proc = subprocess.Popen(
            cmd, stdout=logfile, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}, start_new_session=True
        )
        self.procs.append(proc)
        wait_ready(ready_url, proc, headers=headers)
        return proc

    def stop(self, proc: subprocess.Popen[bytes]) -> None:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()

    def stop_all(self) -> None:
        for proc in self.procs:
            self.stop(proc)


def orchestrate(duration_s: float, skip_litellm: bool, concurrencies: list[int]) -> dict[str, Any]:
    from rich.console import Console
    from rich.progress import Progress

    console = Console()
    workdir = Path(tempfile.mkdtemp(prefix="evolvable-bench-"))
    servers = Servers(workdir)
    results: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
        "duration_s": duration_s,
        "cells": [],
    }
    try:
        mock_port = free_port()
        mock = f"http://127.0.0.1:{mock_port}/v1"
        servers.start(
            [sys.executable, str(ROOT / "benchmarks" / "mock_upstream.py"), "--port", str(mock_port)],
            f"{mock}/models",
            log="mock",
        )
        targets: list[tuple[str, str, str | None, Any]] = [("direct", f"{mock}/chat/completions", None, None)]

        bare_port = free_port()
        targets.append(
            (
                "bare pass-through",
                f"http://127.0.0.1:{bare_port}/v1/chat/completions",
                None,
                lambda: servers.start(
                    [sys.executable, __file__, "bare", "--port", str(bare_port), "--upstream", mock],
                    f"http://127.0.0.1:{bare_port}/v1/models",
                    log="bare",
                ),
            )
        )
        evo_port = free_port()
        evolvable_bin = str(Path(sys.executable).parent / "evolvable")
        targets.append(
            (
                "evolvable (capture on)",
                f"http://127.0.0.1:{evo_port}/v1/chat/completions",
                None,
                lambda: servers.start(
                    [
                        evolvable_bin,
                        "serve",
                        "--upstream",
                        mock,
                        "--port",
                        str(evo_port),
                        "--db",
                        f"sqlite:///{workdir / 'evolvable.db'}",
                        "--spool-dir",
                        str(workdir / "spool"),
                    ],
                    f"http://127.0.0.1:{evo_port}/v1/proxy/status",
                    log="evolvable",
                ),
            )
        )
        if not skip_litellm:
            if not LITELLM_BIN.exists():
                console.print("[yellow]LiteLLM not installed (run benchmarks/setup_litellm.sh); skipping it[/]")
            else:
                lite_port = free_port()
                cfg = workdir / "litellm.yaml"
                cfg.write_text(
                    "model_list:\n  - model_name: mock\n    litellm_params:\n      model: openai/mock\n"
                    f"      api_base: {mock}\n      api_key: sk-bench\n"
                    f"general_settings:\n  master_key: {MASTER_KEY}\n"
                    "litellm_settings:\n  drop_params: true\n  telemetry: false\n"
                )
                targets.append(
                    (
                        "litellm proxy",
                        f"http://127.0.0.1:{lite_port}/v1/chat/completions",
                        MASTER_KEY,
                        lambda: servers.start(
                            [str(LITELLM_BIN), "--config", str(cfg), "--port", str(lite_port), "--num_workers", "1"],
                            f"http://127.0.0.1:{lite_port}/health/liveliness",
                            env={"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "ERROR"},
                            log="litellm",
                        ),
                    )
                )
        cells = len(targets) * len(concurrencies) * 2
        with Progress(console=console) as progress:
            task = progress.add_task("measuring", total=cells)
            for name, url, auth, starter in targets:
                proc = starter() if starter else None
                for stream in (False, True):
                    for c in concurrencies:
                        progress.update(task, description=f"{name} c={c} {'stream' if stream else 'plain'}")
                        summary = measure(url, c, stream, duration_s, auth)
                        results["cells"].append({"target": name, "concurrency": c, "stream": stream, **summary})
                        progress.advance(task)
                if name.startswith("evolvable"):
                    import httpx

                    time.sleep(1.0)
                    status = httpx.get(url.replace("/chat/completions", "/proxy/status")).json()
                    results["evolvable_capture"] = status
                if proc is not None:
                    servers.stop(proc)
        if (workdir / "evolvable.db").exists():
            import sqlite3

            with sqlite3.connect(workdir / "evolvable.db") as db:
                results["evolvable_stored_trajectories"] = db.execute("select count(*) from trajectories").fetchone()[0]
    finally:
        servers.stop_all()
        shutil.rmtree(workdir, ignore_errors=True)
    add_deltas(results)
    return results


def add_deltas(results: dict[str, Any]) -> None:
    direct = {(c["concurrency"], c["stream"]): c for c in results["cells"] if c["target"] == "direct"}
    for cell in results["cells"]:
        base = direct[(cell["concurrency"], cell["stream"])]
        for key in ("ttlb_p50", "ttlb_p95", "ttlb_p99", "ttfb_p50", "ttfb_p99"):
            cell[f"added_{key}"] = cell[key] - base[key]
    by = {(c["target"], c["concurrency"], c["stream"]): c for c in results["cells"]}
    checks: dict[str, Any] = {}
    evo, bare, lite = "evolvable (capture on)", "bare pass-through", "litellm proxy"
    if (evo, 1, False) in by:
        checks["evolvable_added_p50_c1_ms"] = by[(evo, 1, False)]["added_ttlb_p50"]
        checks["target_added_p50_c1_le_1ms"] = checks["evolvable_added_p50_c1_ms"] <= 1.0
    if (evo, 16, False) in by and (bare, 16, False) in by:
        e, b = by[(evo, 16, False)]["added_ttlb_p99"], by[(bare, 16, False)]["added_ttlb_p99"]
        checks["added_p99_c16_evolvable_over_bare"] = e / b if b > 0 else float("inf")
        checks["target_p99_c16_within_1.5x_bare"] = e <= 1.5 * b
    if (evo, 16, False) in by and (lite, 16, False) in by:
        e, li = by[(evo, 16, False)]["added_ttlb_p99"], by[(lite, 16, False)]["added_ttlb_p99"]
        checks["litellm_over_evolvable_added_p99_c16"] = li / e if e > 0 else float("inf")
        checks["target_20x_less_than_litellm"] = li >= 20 * e
    results["checks"] = checks


def print_table(results: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="Proxy overhead (ms; added = target - direct)")
    for col in ("target", "c", "stream", "p50", "p95", "p99", "+p50", "+p95", "+p99", "+TTFB p50", "req/s", "err"):
        table.add_column(col, justify="right")
    for c in results["cells"]:
        table.add_row(
            c["target"],
            str(c["concurrency"]),
            "yes" if c["stream"] else "no",
            f"{c['ttlb_p50']:.2f}",
            f"{c['ttlb_p95']:.2f}",
            f"{c['ttlb_p99']:.2f}",
            f"{c['added_ttlb_p50']:+.2f}",
            f"{c['added_ttlb_p95']:+.2f}",
            f"{c['added_ttlb_p99']:+.2f}",
            f"{c['added_ttfb_p50']:+.2f}" if c["stream"] else "",
            f"{c['rps']:.0f}",
            str(c["errors"]),
        )
    console = Console()
    console.print(table)
    for key, value in results.get("checks", {}).items():
        console.print(f"{key}: {value:.3f}" if isinstance(value, float) else f"{key}: {value}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="role")
    bare = sub.add_parser("bare")
    bare.add_argument("--port", type=int, required=True)
    bare.add_argument("--upstream", required=True)
    load = sub.add_parser("load")
    load.add_argument("--url", required=True)
    load.add_argument("--concurrency", type=int, default=1)
    load.add_argument("--duration", type=float, default=3.0)
    load.add_argument("--warmup", type=float, default=0.5)
    load.add_argument("--stream", action="store_true")
    load.add_argument("--auth")
    load.add_argument("--out", required=True)
    parser.add_argument("--duration", type=float, default=3.0, help="Seconds measured per cell.")
    parser.add_argument("--skip-litellm", action="store_true")
    parser.add_argument("--concurrency", default="1,16,64")
    args = parser.parse_args()
    if args.role == "bare":
        run_bare(args.port, args.upstream)
    elif args.role == "load":
        run_load(args.url, args.concurrency, args.duration, args.stream, args.warmup, args.auth, args.out)
    else:
        results = orchestrate(args.duration, args.skip_litellm, [int(c) for c in args.concurrency.split(",")])
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(results, indent=2))
        print_table(results)


if __name__ == "__main__":
    main()
