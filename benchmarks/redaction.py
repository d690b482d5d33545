"""Redaction: our engine vs Presidio and detect-secrets, side by side on the same labeled corpus.

    bash benchmarks/setup_redaction_peers.sh      # once: peers into .venv-bench-redaction (kept out of .venv)
    .venv/bin/python benchmarks/redaction.py      # prints a table, writes benchmarks/results/redaction.json
    .venv/bin/python benchmarks/redaction.py --corpus broad:heldout   # or broad:tuned, public (generated corpora)

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

from evolvable.governance.redaction import RedactionEngine, native
from evolvable.governance.redaction.evaluation import STRUCTURED_GROUPS, load_corpus, score
from evolvable.governance.redaction.names import NameRecognizer
from evolvable.governance.redaction.phones import valid_international, valid_national

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "benchmarks" / "corpus" / "redaction_corpus.jsonl"
PEER_PYTHON = ROOT / ".venv-bench-redaction" / "bin" / "python"
RESULTS = ROOT / "benchmarks" / "results" / "redaction.json"
PEERS = ("ours-ner", "detect-secrets", "presidio")


def load_records(corpus: str) -> list[dict[str, Any]]:
    """A JSONL path, or a generated corpus: `broad:tuned`, `broad:heldout` (benchmarks/corpus/broad.py) or
    `public` (presidio-evaluator's templates and people; needs `pip install --no-deps presidio-evaluator`)."""
    if corpus.startswith("broad:") or corpus == "public":
        from corpus import broad  # benchmarks/corpus: this script's folder is first on sys.path

        records = broad.public_corpus(1500) if corpus == "public" else broad.generate(corpus[6:], 1500, 1)
        if records is None:
            raise SystemExit("the public corpus needs: pip install --no-deps presidio-evaluator")
        return records
    return load_corpus(corpus)


def run_ours(
    records: list[dict[str, Any]], repeats: int, min_seconds: float, engine: RedactionEngine | None = None
) -> tuple[dict[str, list[tuple[int, int]]], float, float]:
    """(detections, best pass CPU seconds, median pass CPU seconds) over at least `repeats` passes and
    `min_seconds` of CPU: the best is the engine's cost on an uncontended core (shared cores here switch
    between quiet and contended phases lasting seconds), the median what it cost in this run. The phone
    validity caches and the engine's cache of repeated texts are emptied before each pass, so no pass profits
    from an earlier one's numbers or texts."""
    engine = engine or RedactionEngine()
    times: list[float] = []
    spent = 0.0
    while len(times) < repeats or spent < min_seconds:
        valid_national.cache_clear()
        valid_international.cache_clear()
        engine.clear_cache()  # the corpus figure is a first sight of each text, not a repeat
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
    parser.add_argument("--corpus", default=str(CORPUS), help="a JSONL path, broad:tuned, broad:heldout or public")
    parser.add_argument("--repeats", type=int, default=60, help="least timing passes for our engine")
    parser.add_argument("--min-seconds", type=float, default=3.0, help="least CPU seconds of timing passes")
    parser.add_argument("--peers", default=",".join(PEERS), help="comma-separated subset of: " + ", ".join(PEERS))
    args = parser.parse_args()
    args.corpus_name = args.corpus.replace(":", "_").rsplit("/", 1)[-1].removesuffix(".jsonl")
    console = Console(width=170)
    records = load_records(args.corpus)
    if args.corpus != str(CORPUS):
        corpus_file = Path(tempfile.mkdtemp()) / "corpus.jsonl"  # the peers read the corpus from a file
        corpus_file.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
        args.corpus = corpus_file
    results_path = RESULTS if args.corpus == str(CORPUS) else RESULTS.with_name(f"redaction_{args.corpus_name}.json")
    size_mb = sum(len(r["text"].encode("utf-8")) for r in records) / 1e6
    peers = [p for p in args.peers.split(",") if p] if PEER_PYTHON.exists() else []
    if not PEER_PYTHON.exists():
        console.print("[yellow]no .venv-bench-redaction: run benchmarks/setup_redaction_peers.sh to compare peers")

    runs: dict[str, tuple[dict[str, list[tuple[int, int]]], float]] = {}
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("redacting the corpus", total=1 + len(peers))
        detections, best, median = run_ours(records, args.repeats, args.min_seconds)
        runs["ours"] = (detections, best)
        no_names = RedactionEngine([r for r in RedactionEngine().recognizers if not isinstance(r, NameRecognizer)])
        detections, no_names_best, _ = run_ours(records, max(10, args.repeats // 4), args.min_seconds / 4, no_names)
        runs["ours (names off)"] = (detections, no_names_best)
        progress.advance(task)
        for peer in peers:
            progress.update(task, description=f"running {peer}")
            runs[peer] = run_peer(peer, Path(args.corpus))
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
    if results_path.exists():
        earlier = json.loads(results_path.read_text()).get("engines", {})
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
            *(f"{groups[g]:.2f}" if g in groups else "-" for g in STRUCTURED_GROUPS),  # "-": none planted
            f"{groups['person']:.2f}" if "person" in groups else "-",
            f"{s['damage']:.1%}" if s["hard_negatives"] else "-",
            f"{s['precision']:.3f}" if s["precision"] is not None else "-",
            f"{speed:.3f}",
            f"{speed / ours['mb_per_s']:.4f}x" if name != "ours" else "1x",
        )
    console.print(table)
    engine = native.state()
    console.print(
        f"ours ({engine.engine} modules: {engine.reason}): best pass {ours['mb_per_s']:.2f} MB/s, "
        f"median pass {ours['mb_per_s_median']:.2f} MB/s (CPU time)"
    )
    results["redaction_modules"] = {"engine": engine.engine, "reason": engine.reason}
    results_path.parent.mkdir(parents=True, exist_ok=True)
    results["machine"] = {"cpus": os.cpu_count(), "python": sys.version.split()[0], "load_average": os.getloadavg()}
    console.print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    results_path.write_text(json.dumps(results, indent=2) + "\n")
    console.print(f"wrote {results_path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
