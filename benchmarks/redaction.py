"""Redaction: our engine vs Presidio and detect-secrets, side by side on the same labeled corpus.

    bash benchmarks/setup_redaction_peers.sh      # once: peers into .venv-bench-redaction (kept out of .venv)
    .venv/bin/python benchmarks/redaction.py      # prints a table, writes benchmarks/results/redaction.json

Scores are span-based (see evolvable.governance.redaction.evaluation): structured recall, person recall,
hard-negative damage, precision. Throughput is corpus bytes per CPU second of the detecting process (one
core; model and plugin loading excluded), so other load on the machine does not distort it much. Our engine
is timed doing the full redaction (find + replace); the peers only detect. Peers run as subprocesses in
their own venv; without it only our engine is measured.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from evolvable.governance.redaction import RedactionEngine
from evolvable.governance.redaction.evaluation import STRUCTURED_GROUPS, load_corpus, score

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "governance" / "corpus" / "redaction_corpus.jsonl"
PEER_PYTHON = ROOT / ".venv-bench-redaction" / "bin" / "python"
RESULTS = ROOT / "benchmarks" / "results" / "redaction.json"
PEERS = ("ours-ner", "detect-secrets", "presidio")


def run_ours(
    records: list[dict[str, Any]], repeats: int, min_seconds: float
) -> tuple[dict[str, list[tuple[int, int]]], float, float]:
    """(detections, best pass CPU seconds, median pass CPU seconds) over at least `repeats` passes and
    `min_seconds` of CPU: the best is the engine's cost on an uncontended core (shared cores here switch
    between quiet and contended phases lasting seconds), the median what it cost in this run."""
    engine = RedactionEngine()
    times: list[float] = []
    spent = 0.0
    while len(times) < repeats or spent < min_seconds:
        start = time.process_time()
        for r in records:
            engine.redact(r["text"])
        times.append(time.process_time() - start)
        spent += times[-1]
    detections = {r["id"]: [(f.start, f.end) for f in engine.find(r["text"])] for r in records}
    return detections, min(times), statistics.median(times)


def run_peer(engine: str, corpus: Path) -> tuple[dict[str, list[tuple[int, int]]], float]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.json"
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "HF_HUB_OFFLINE": "1"}
        subprocess.run(
            [str(PEER_PYTHON), str(ROOT / "benchmarks" / "redaction_peers.py"), engine, str(corpus), str(out)],
            check=True,
            env=env,
            capture_output=True,
            timeout=1800,
        )
        data = json.loads(out.read_text())
    return {k: [tuple(x) for x in v] for k, v in data["detections"].items()}, data["cpu_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--repeats", type=int, default=60, help="least timing passes for our engine")
    parser.add_argument("--min-seconds", type=float, default=3.0, help="least CPU seconds of timing passes")
    parser.add_argument("--peers", default=",".join(PEERS), help="comma-separated subset of: " + ", ".join(PEERS))
    args = parser.parse_args()
    console = Console(width=170)
    records = load_corpus(args.corpus)
    size_mb = sum(len(r["text"].encode("utf-8")) for r in records) / 1e6
    peers = [p for p in args.peers.split(",") if p] if PEER_PYTHON.exists() else []
    if not PEER_PYTHON.exists():
        console.print("[yellow]no .venv-bench-redaction: run benchmarks/setup_redaction_peers.sh to compare peers")

    runs: dict[str, tuple[dict[str, list[tuple[int, int]]], float]] = {}
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("redacting the corpus", total=1 + len(peers))
        detections, best, median = run_ours(records, args.repeats, args.min_seconds)
        runs["ours"] = (detections, best)
        progress.advance(task)
        for peer in peers:
            progress.update(task, description=f"running {peer}")
            runs[peer] = run_peer(peer, args.corpus)
            progress.advance(task)
    if "presidio" in runs and "detect-secrets" in runs:
        union = {
            rid: runs["presidio"][0].get(rid, []) + runs["detect-secrets"][0].get(rid, [])
            for rid in runs["presidio"][0]
        }
        runs["presidio+detect-secrets"] = (union, runs["presidio"][1] + runs["detect-secrets"][1])

    results: dict[str, Any] = {
        "corpus": {
            "records": len(records),
            "megabytes": round(size_mb, 4),
            "planted_structured": sum(1 for r in records for s in r["spans"] if s["group"] != "person"),
            "planted_person": sum(1 for r in records for s in r["spans"] if s["group"] == "person"),
            "hard_negatives": sum(len(r["negatives"]) for r in records),
        },
        "engines": {},
    }
    for name, (detections, cpu_s) in runs.items():
        s = score(records, detections)
        s.pop("misses")
        s["cpu_s"] = round(cpu_s, 4)
        s["mb_per_s"] = round(size_mb / cpu_s, 4) if cpu_s else None
        results["engines"][name] = s
    results["engines"]["ours"]["mb_per_s_median"] = round(size_mb / median, 4)
    # Peers not run this time (no peer venv, or --peers subset) keep their last measured rows, marked as such.
    if RESULTS.exists():
        earlier = json.loads(RESULTS.read_text()).get("engines", {})
        for name, row in earlier.items():
            if name not in results["engines"]:
                results["engines"][name] = {**row, "from_earlier_run": True}

    ours = results["engines"]["ours"]
    table = Table(title=f"Redaction on {len(records)} records ({size_mb:.2f} MB), one core")
    for col in (
        "engine",
        "recall (structured)",
        *STRUCTURED_GROUPS,
        "person",
        "damage",
        "precision",
        "MB/s",
        "vs ours",
    ):
        table.add_column(col, justify="right" if col != "engine" else "left")
    for name, s in results["engines"].items():
        groups = s["recall_by_group"]
        speed = s["mb_per_s"] or 0.0
        table.add_row(
            name,
            f"{s['recall_structured']:.3f}",
            *(f"{groups.get(g, 0):.2f}" for g in STRUCTURED_GROUPS),
            f"{groups.get('person', 0):.2f}",
            f"{s['damage']:.1%}",
            f"{s['precision']:.3f}" if s["precision"] is not None else "-",
            f"{speed:.3f}",
            f"{speed / ours['mb_per_s']:.4f}x" if name != "ours" else "1x",
        )
    console.print(table)
    console.print(
        f"ours: best pass {ours['mb_per_s']:.2f} MB/s, median pass {ours['mb_per_s_median']:.2f} MB/s (CPU time)"
    )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    results["machine"] = {"cpus": os.cpu_count(), "python": sys.version.split()[0]}
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    console.print(f"wrote {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
