"""Redaction throughput of this tree against a git revision, both imported into one process, in alternating pairs.

    .venv/bin/python benchmarks/redaction_pairs.py --baseline main --corpus public --pairs 20

`redaction_ab.py` runs each side in its own process; on shared, loaded cores the two processes see different
load phases and the ratio swings by 10% or more. Here the baseline's redaction package (`git archive`) is
imported under another name (`_baseline_redaction`, its own imports rewritten to it; the rest of `evolvable`
is shared, so both count findings in the same metric) and each pair times one pass of each engine back to back,
alternating which goes first, with `time.process_time`. The ratio of each pair (baseline CPU / this tree's
CPU) sees the same load on both sides; reported are the median of the pair ratios and of best / median passes,
with MB per CPU-second and the load average. The phone validity caches and the engines' caches of repeated
texts are emptied before every pass (first sight of every text).
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from redaction import load_records
from redaction_ab import baseline_src

_PACKAGE = "evolvable.governance.redaction"
_RENAMED = "_baseline_redaction"


def import_baseline(rev: str, into: Path) -> ModuleType:
    """The baseline's redaction package, importable next to this tree's under `_RENAMED`."""
    src = baseline_src(rev, into)
    package = into / _RENAMED
    (src / "evolvable" / "governance" / "redaction").rename(package)
    for path in package.glob("*.py"):
        path.write_text(path.read_text().replace(_PACKAGE, _RENAMED))
    sys.path.insert(0, str(into))
    return importlib.import_module(_RENAMED)


def timed_pass(engine: Any, phones: ModuleType, texts: list[str]) -> float:
    """CPU seconds of one first-sight pass of `engine.redact` over `texts`."""
    phones.valid_national.cache_clear()
    phones.valid_international.cache_clear()
    getattr(engine, "clear_cache", lambda: None)()
    start = time.process_time()
    for text in texts:
        engine.redact(text)
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default="main", help="git revision to compare with")
    parser.add_argument("--corpus", default="broad:tuned", help="as in redaction.py: a JSONL path, broad:*, public")
    parser.add_argument("--pairs", type=int, default=20)
    args = parser.parse_args()
    texts = [r["text"] for r in load_records(args.corpus)]
    mb = sum(len(t.encode()) for t in texts) / 1e6
    with tempfile.TemporaryDirectory() as tmp:
        old = import_baseline(args.baseline, Path(tmp))
        new = importlib.import_module(_PACKAGE)
        sides = {
            "baseline": (old.RedactionEngine(), importlib.import_module(f"{_RENAMED}.phones")),
            "this tree": (new.RedactionEngine(), importlib.import_module(f"{_PACKAGE}.phones")),
        }
        for engine, phones in sides.values():
            timed_pass(engine, phones, texts)  # warm up: vocabularies, regex caches
        load_before = os.getloadavg()
        times: dict[str, list[float]] = {name: [] for name in sides}
        for pair in range(args.pairs):
            for name in list(sides) if pair % 2 == 0 else reversed(list(sides)):
                times[name].append(timed_pass(*sides[name], texts))
        load_after = os.getloadavg()
    ratios = [b / n for b, n in zip(times["baseline"], times["this tree"], strict=True)]
    print(f"corpus {args.corpus}: {mb:.3f} MB, {len(texts)} texts; baseline {args.baseline}; {args.pairs} pairs")
    for name, ts in times.items():
        best, median = mb / min(ts), mb / statistics.median(ts)
        print(f"  {name:10s} MB per CPU-second: best pass {best:.2f}, median pass {median:.2f}")
    best_ratio = min(times["baseline"]) / min(times["this tree"])
    print(f"  ratio this tree / baseline: median of pairs {statistics.median(ratios):.3f}x, best {best_ratio:.3f}x")
    print(
        f"  load average (1/5/15 min) before {'/'.join(f'{x:.1f}' for x in load_before)}, "
        f"after {'/'.join(f'{x:.1f}' for x in load_after)} on {os.cpu_count()} CPUs"
    )


if __name__ == "__main__":
    main()
