"""Governance costs: API-key verification (SHA-256 vs scrypt, cold and cached), the Governor, and curation.

Prints a Rich table and writes benchmarks/results/governance.json. Runs in well under a minute on 2 cores.
"""

from __future__ import annotations

import hashlib
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from rich.console import Console
from rich.table import Table

from evolvable.governance.curation import Deduplicator, QualityConfig, conversation_text, quality_issues
from evolvable.governance.pipeline import Governor
from evolvable.governance.tenants import TenantDirectory
from evolvable.protocol.examples import make_trajectory
from evolvable.protocol.models import events_for
from evolvable.store import Store

RESULTS = Path(__file__).parent / "results" / "governance.json"


def per_call_us(fn: Callable[[], Any], repeat: int) -> float:
    """Median over 5 rounds of the mean time per call, in microseconds."""
    rounds = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(repeat):
            fn()
        rounds.append((time.perf_counter() - start) / repeat * 1e6)
    return statistics.median(rounds)


def main() -> None:
    key = "evk_" + "x" * 43
    results: dict[str, float] = {}
    results["sha256 verify (us)"] = per_call_us(lambda: hashlib.sha256(key.encode()).hexdigest(), 20_000)
    results["scrypt n=2^14 r=8 verify (us)"] = per_call_us(
        lambda: hashlib.scrypt(key.encode(), salt=b"0123456789abcdef", n=2**14, r=8, p=1), 5
    )
    with tempfile.TemporaryDirectory() as tmp:
        store = Store.open(f"sqlite:///{tmp}/bench.db")
        cold = TenantDirectory(store.engine, cache_ttl_s=0)
        cold.create_tenant("acme")
        issued = cold.issue_key("acme")
        warm = TenantDirectory(store.engine, cache_ttl_s=30)
        warm.authenticate(issued.key)
        results["authenticate, uncached (SQLite lookup) (us)"] = per_call_us(lambda: cold.authenticate(issued.key), 500)
        results["authenticate, cached (us)"] = per_call_us(lambda: warm.authenticate(issued.key), 20_000)

        runs = [
            make_trajectory(question=f"Order {1000 + i}: mail me at user{i}@example.com or call +1 415 555 {i:04d}")
            for i in range(300)
        ]
        events = [e for t in runs for e in events_for(t)]
        governor = Governor(store, directory=warm)
        governor.govern(events[:10])  # build the engine once
        start = time.perf_counter()
        governor.govern(events)
        elapsed = time.perf_counter() - start
        results["Governor full capture + redaction (events/s)"] = len(events) / elapsed
        warm.update_tenant("acme", capture="metadata")
        start = time.perf_counter()
        governor.govern(events)
        results["Governor metadata capture + redaction (events/s)"] = len(events) / (time.perf_counter() - start)
        store.close()

    quality = QualityConfig()
    for mode in ("exact", "near"):
        dedup = Deduplicator(mode)  # type: ignore[arg-type]
        start = time.perf_counter()
        for t in runs:
            text = conversation_text(t)
            quality_issues(t, quality, text)
            dedup.check(text)
        results[f"curation, quality + {mode} dedup (trajectories/s)"] = len(runs) / (time.perf_counter() - start)

    results["scrypt / sha256 cost ratio"] = results["scrypt n=2^14 r=8 verify (us)"] / results["sha256 verify (us)"]
    table = Table("measure", "value")
    for name, value in results.items():
        table.add_row(name, f"{value:,.1f}")
    Console().print(table)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))


if __name__ == "__main__":
    main()
