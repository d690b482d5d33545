"""Checks that this tree's redactor finds exactly what a git revision's finds, on every corpus.

    .venv/bin/python benchmarks/redaction_equivalence.py --baseline main
    .venv/bin/python benchmarks/redaction_equivalence.py --baseline HEAD   # the compiled build against its Python

A speed-up of the engine must not change its findings. Each side runs in its own process (the baseline's
`src/` taken from git, as in redaction_ab.py) and reports, per corpus record, the findings
(start, end, kind, priority) and the redacted text, and whether a second sight of the text (from the
engine's cache of repeated texts, where it has one) finds the same; any difference is printed and the exit status is 1.
Corpora: the committed one, broad:tuned, broad:heldout and public (skipped, and said so, where the public
corpus's package is missing).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from redaction_ab import ROOT, baseline_src

CORPORA = (
    str(ROOT / "benchmarks" / "corpus" / "redaction_corpus.jsonl"),
    "broad:tuned",
    "broad:heldout",
    "public",
)

_CHILD = """
import json, sys
sys.path.insert(0, {bench!r})
from redaction import load_records
from evolvable.governance.redaction import PlaceholderMap, RedactionEngine
engine = RedactionEngine()
out = {{}}
for corpus in {corpora!r}:
    try:
        records = load_records(corpus)
    except SystemExit:
        out[corpus] = None
        continue
    placeholders = PlaceholderMap()  # one map for the whole corpus: placeholder numbering must match too
    rows = []
    for r in records:
        result = engine.redact(r["text"], placeholders)
        rows.append([r["id"], [list(f) for f in result.findings], result.text, result.failed])
    # a second sight of each text (served from the engine's cache where it has one) must find the same
    for r, row in zip(records, rows):
        if [list(f) for f in engine.find(r["text"])] != row[1]:
            row.append("second sight differs")
    out[corpus] = rows
print(json.dumps(out))
"""


def run_side(src: Path, corpora: tuple[str, ...]) -> dict[str, list[list[object]] | None]:
    code = _CHILD.format(bench=str(ROOT / "benchmarks"), corpora=corpora)
    env = {**os.environ, "PYTHONPATH": str(src), "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True).stdout
    result: dict[str, list[list[object]] | None] = json.loads(out.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default="main", help="git revision to compare with")
    parser.add_argument(
        "--tree", type=Path, default=ROOT / "src", help="the source root to check (its compiled build runs if current)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        before = run_side(baseline_src(args.baseline, Path(tmp)), CORPORA)
    after = run_side(args.tree.resolve(), CORPORA)
    differences = 0
    for corpus in CORPORA:
        old, new = before[corpus], after[corpus]
        name = corpus.rsplit("/", 1)[-1]
        if old is None or new is None:
            print(f"{name}: skipped (corpus not available)")
            continue
        diff = [(o, n) for o, n in zip(old, new, strict=True) if o != n]
        findings = sum(len(row[1]) for row in new)  # type: ignore[arg-type]
        print(f"{name}: {len(new)} records, {findings} findings, {len(diff)} records differ")
        for o, n in diff[:5]:
            print(f"  {o[0]}: baseline {o[1]}\n  {' ' * len(str(o[0]))}  this tree {n[1]}")
        differences += len(diff)
    sys.exit(1 if differences else 0)


if __name__ == "__main__":
    main()
