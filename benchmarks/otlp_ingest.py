"""OTLP ingest, side by side in one run: the same 4-span agent run (2 chat, 1 tool, the root) sent to a
governed `evolvable serve` as OTLP/JSON, OTLP/protobuf+gzip (a whole trace per request, or one span per
request as the SDK's SimpleSpanProcessor sends), and, as the peer, through Evolvable's own session API
(POST /v1/sessions, 3 steps, end), which stores asynchronously through the spool.

A closed loop at concurrency 1 sends `--traces` runs per mode; "runs/s" includes waiting until the last
one is readable (a GET that waits for the writer), so both paths are measured to the store.

    .venv/bin/python benchmarks/otlp_ingest.py [--traces 100]

Writes benchmarks/results/otlp_ingest.json and prints a Rich table.
"""

from __future__ import annotations

import argparse
import base64
import gzip
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from google.protobuf.json_format import ParseDict
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from evolvable.policy_server.launcher import free_port

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_env import LoadMonitor, describe, environment

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "otlp_ingest.json"
T0 = 1_700_000_000_000_000_000
QUESTION = "Where is my order A-1? I ordered it last week. Reach me at ann@example.com or +1 415 555 0100."
TOOL_CALL = {"id": "call_1", "name": "lookup", "arguments": {"order": "A-1"}}


def _attr(key: str, value: Any) -> dict[str, Any]:
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    return {"key": key, "value": {"stringValue": value if isinstance(value, str) else json.dumps(value)}}


def _parts(role: str, text: str) -> list[dict[str, Any]]:
    return [{"role": role, "parts": [{"type": "text", "content": text}]}]


def agent_run_spans() -> list[dict[str, Any]]:
    """One run's spans in export order (children first, the root last), with a fresh trace id."""
    trace, root = secrets.token_hex(16), secrets.token_hex(8)

    def span(name: str, start: int, parent: str | None, **attrs: Any) -> dict[str, Any]:
        return {
            "traceId": trace,
            "spanId": root if parent is None else secrets.token_hex(8),
            **({"parentSpanId": parent} if parent else {}),
            "name": name,
            "kind": 3 if name.startswith("chat") else 1,
            "startTimeUnixNano": str(T0 + start * 1_000_000),
            "endTimeUnixNano": str(T0 + start * 1_000_000 + 500_000),
            "attributes": [_attr(k.replace("__", "."), v) for k, v in attrs.items()],
        }

    call = [{"role": "assistant", "parts": [{"type": "tool_call", **TOOL_CALL}]}]
    return [
        span(
            "chat gpt-4o",
            1,
            root,
            gen_ai__operation__name="chat",
            gen_ai__request__model="gpt-4o",
            gen_ai__usage__input_tokens=52,
            gen_ai__usage__output_tokens=9,
            gen_ai__input__messages=_parts("user", QUESTION),
            gen_ai__output__messages=call,
        ),
        span(
            "execute_tool lookup",
            2,
            root,
            gen_ai__operation__name="execute_tool",
            gen_ai__tool__name="lookup",
            gen_ai__tool__call__id="call_1",
            gen_ai__tool__call__result='{"status": "shipped"}',
        ),
        span(
            "chat gpt-4o",
            3,
            root,
            gen_ai__operation__name="chat",
            gen_ai__request__model="gpt-4o",
            gen_ai__input__messages=_parts("tool", "shipped"),
            gen_ai__output__messages=_parts("assistant", "Your order A-1 has shipped."),
        ),
        span("invoke_agent support", 0, None, gen_ai__operation__name="invoke_agent", gen_ai__agent__name="support"),
    ]


def _doc(spans: list[dict[str, Any]]) -> dict[str, Any]:
    return {"resourceSpans": [{"resource": {}, "scopeSpans": [{"scope": {"name": "bench"}, "spans": spans}]}]}


def _protobuf(spans: list[dict[str, Any]]) -> bytes:
    ids = ("traceId", "spanId", "parentSpanId")
    b64 = [{**s, **{k: base64.b64encode(bytes.fromhex(s[k])).decode() for k in ids if k in s}} for s in spans]
    return gzip.compress(ParseDict(_doc(b64), ExportTraceServiceRequest()).SerializeToString())


JSON_HEADERS = {"content-type": "application/json"}
PROTO_HEADERS = {"content-type": "application/x-protobuf", "content-encoding": "gzip"}


def otlp_json(client: httpx.Client, spans: list[dict[str, Any]]) -> list[float]:
    return [_timed(lambda: client.post("/v1/traces", content=json.dumps(_doc(spans)), headers=JSON_HEADERS))]


def otlp_protobuf(client: httpx.Client, spans: list[dict[str, Any]]) -> list[float]:
    return [_timed(lambda: client.post("/v1/traces", content=_protobuf(spans), headers=PROTO_HEADERS))]


def otlp_protobuf_per_span(client: httpx.Client, spans: list[dict[str, Any]]) -> list[float]:
    return [_timed(lambda s=s: client.post("/v1/traces", content=_protobuf([s]), headers=PROTO_HEADERS)) for s in spans]


def session_api(client: httpx.Client, spans: list[dict[str, Any]]) -> list[float]:
    """The peer: the same run through POST /v1/sessions, /steps and /end (stored by the async writer)."""
    times: list[float] = []
    created: dict[str, Any] = {}

    def create() -> httpx.Response:
        r = client.post("/v1/sessions", json={"agent": "support"})
        created.update(r.json())
        return r

    times.append(_timed(create))
    key = {"authorization": f"Bearer {created['api_key']}"}
    call = {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": '{"order": "A-1"}'}}
    steps = [
        {
            "kind": "llm_call",
            "model": "gpt-4o",
            "request_messages": [{"role": "user", "content": QUESTION}],
            "choices": [{"message": {"role": "assistant", "content": None, "tool_calls": [call]}}],
        },
        {"kind": "tool_call", "tool_name": "lookup", "tool_call_id": "call_1", "result": {"status": "shipped"}},
        {
            "kind": "llm_call",
            "model": "gpt-4o",
            "request_messages": [{"role": "tool", "tool_call_id": "call_1", "content": "shipped"}],
            "choices": [{"message": {"role": "assistant", "content": "Your order A-1 has shipped."}}],
        },
    ]
    for step in steps:
        times.append(
            _timed(lambda step=step: client.post(f"/v1/sessions/{created['id']}/steps", json=step, headers=key))
        )
    times.append(
        _timed(lambda: client.post(f"/v1/sessions/{created['id']}/end", json={"status": "completed"}, headers=key))
    )
    return times


def _timed(call: Callable[[], httpx.Response]) -> float:
    start = time.perf_counter()
    r = call()
    elapsed = time.perf_counter() - start
    if r.status_code >= 300 or b"partialSuccess" in r.content:
        raise RuntimeError(f"{r.request.url}: {r.status_code} {r.text[:300]}")
    return elapsed * 1000


MODES: dict[str, Callable[[httpx.Client, list[dict[str, Any]]], list[float]]] = {
    "OTLP/JSON, trace per request": otlp_json,
    "OTLP/protobuf+gzip, trace per request": otlp_protobuf,
    "OTLP/protobuf+gzip, span per request": otlp_protobuf_per_span,
    "peer: session API (sessions, steps, end)": session_api,
}


def _pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1] if len(values) > 1 else values[0]


def run_mode(client: httpx.Client, name: str, traces: int) -> dict[str, Any]:
    send = MODES[name]
    for _ in range(3):
        send(client, agent_run_spans())  # warm-up
    latencies: list[float] = []
    start = time.perf_counter()
    for _ in range(traces):
        latencies += send(client, agent_run_spans())
    client.get("/v1/trajectories", params={"limit": 1}).raise_for_status()  # waits until the writer caught up
    wall = time.perf_counter() - start
    return {
        "mode": name,
        "runs": traces,
        "requests": len(latencies),
        "p50_ms": round(_pct(latencies, 50), 2),
        "p95_ms": round(_pct(latencies, 95), 2),
        "runs_per_s": round(traces / wall, 1),
        "spans_per_s": round(4 * traces / wall, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=int, default=100)
    args = parser.parse_args()
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "EVOLVABLE_HOME": tmp}
        cmd = [
            sys.executable,
            "-m",
            "evolvable.cli.main",
            "serve",
            "--upstream",
            "http://127.0.0.1:9/v1",
            "--db",
            f"sqlite:///{tmp}/bench.db",
            "--port",
            str(port),
            "--no-control",
        ]
        serve = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
                deadline = time.monotonic() + 120
                while True:
                    try:
                        client.get("/v1/proxy/status")
                        break
                    except httpx.TransportError:
                        if serve.poll() is not None or time.monotonic() > deadline:
                            raise RuntimeError("evolvable serve did not start") from None
                        time.sleep(0.2)
                with LoadMonitor() as monitor:
                    rows = [run_mode(client, name, args.traces) for name in MODES]
        finally:
            serve.terminate()
            serve.wait(30)
    load = monitor.summary()
    report = {"traces": args.traces, "load_average": load, "environment": environment(load), "rows": rows}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    from rich.console import Console
    from rich.table import Table

    table = Table("mode", "requests", "p50 ms", "p95 ms", "runs/s", "spans/s", title="OTLP ingest (governed, SQLite)")
    for r in rows:
        table.add_row(*(str(r[k]) for k in ("mode", "requests", "p50_ms", "p95_ms", "runs_per_s", "spans_per_s")))
    Console().print(table)
    Console().print(f"{describe(load)}; results in {RESULTS}")


if __name__ == "__main__":
    main()
