"""Redaction throughput of this tree against an earlier revision, side by side in one run.

    .venv/bin/python benchmarks/redaction_ab.py --baseline main --corpus broad:tuned --rounds 6

The baseline's `src/` is taken from git (`git archive`) into a temporary directory. Each round runs one
process per side, alternating which goes first, and each process times `--passes` passes over the corpus
with `time.process_time` (CPU seconds of the redacting process, less sensitive to other load than wall time;
the phone validity caches are emptied before every pass). Reported per side: MB per CPU-second (the per-core
figure), best and median pass, the ratio new / baseline of both, and the load average over the run, since on
shared cores contention lowers every figure (the ratio much less).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# What one side's process runs: load the corpus, warm up, time passes, print the pass CPU times as JSON.
_CHILD = """
import json, sys, time
sys.path.insert(0, {bench!r})
from redaction import load_records
from evolvable.governance.redaction import RedactionEngine
from evolvable.governance.redaction.phones import valid_international, valid_national
texts = [r["text"] for r in load_records({corpus!r})]
engine = RedactionEngine()
for t in texts:
    engine.redact(t)
times = []
for _ in range({passes}):
    valid_national.cache_clear(); valid_international.cache_clear()
    start = time.process_time()
    for t in texts:
        engine.redact(t)
    times.append(time.process_time() - start)
print(json.dumps({{"mb": sum(len(t.encode()) for t in texts) / 1e6, "times": times}}))
"""


def baseline_src(rev: str, into: Path) -> Path:
    archive = subprocess.run(["git", "archive", rev, "src"], cwd=ROOT, check=True, capture_output=True).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into / "src"


def run_side(src: Path, corpus: str, passes: int) -> dict[str, object]:
    code = _CHILD.format(bench=str(ROOT / "benchmarks"), corpus=corpus, passes=passes)
    env = {**os.environ, "PYTHONPATH": str(src), "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True).stdout
    result: dict[str, object] = json.loads(out.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default="main", help="git revision to compare with")
    parser.add_argument("--corpus", default="broad:tuned", help="as in redaction.py: a JSONL path, broad:*, public")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--passes", type=int, default=5)
    args = parser.parse_args()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        sides = {"baseline": baseline_src(args.baseline, Path(tmp)), "this tree": ROOT / "src"}
        times: dict[str, list[float]] = {name: [] for name in sides}
        mb = 0.0
        for round_ in range(args.rounds):
            order = list(sides) if round_ % 2 == 0 else list(reversed(sides))
            for name in order:
                result = run_side(sides[name], args.corpus, args.passes)
                mb = float(result["mb"])  # type: ignore[arg-type]
                times[name] += result["times"]  # type: ignore[arg-type]
    load_after = os.getloadavg()
    print(f"corpus {args.corpus}: {mb:.3f} MB; baseline {args.baseline}; {args.rounds} rounds x {args.passes} passes")
    rows = {}
    for name, ts in times.items():
        best, median = mb / min(ts), mb / statistics.median(ts)
        rows[name] = (best, median)
        print(f"  {name:10s} MB per CPU-second: best pass {best:.2f}, median pass {median:.2f}")
    (b_best, b_median), (n_best, n_median) = rows["baseline"], rows["this tree"]
    print(f"  ratio this tree / baseline: best {n_best / b_best:.3f}x, median {n_median / b_median:.3f}x")
    print(
        f"  load average (1/5/15 min) before {'/'.join(f'{x:.1f}' for x in load_before)}, "
        f"after {'/'.join(f'{x:.1f}' for x in load_after)} on {os.cpu_count()} CPUs"
    )


if __name__ == "__main__":
    main()
