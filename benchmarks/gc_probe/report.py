"""Summarize the files `sitecustomize.py` wrote: per process, collections while serving and their cost,
and for the slowest sampled ones what the young generation held and what ran during them.

    .venv/bin/python benchmarks/gc_probe/report.py /tmp/gc [--slowest 3]
"""

from __future__ import annotations

import argparse
import glob
import json


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("prefix")
    parser.add_argument("--slowest", type=int, default=3)
    args = parser.parse_args()
    for path in sorted(glob.glob(f"{args.prefix}.*.json")):
        report = json.load(open(path))  # noqa: SIM115
        if not report["serving"]:
            continue
        src = next((p for p in report.get("pythonpath", "").split(":") if p.endswith("/src")), "")
        print(f"{path}: {report.get('process')} src={src} threshold={report['threshold']}")
        for generation, entry in sorted(report["serving"].items()):
            print(
                f"  gen{generation}: {entry['n']} collections, {entry['cpu_ms']:.1f} ms CPU in all, "
                f"max {entry['cpu_max_ms']:.2f} ms CPU / {entry['wall_max_ms']:.2f} ms wall"
            )
        samples = [s for s in report["samples"] if isinstance(s, dict) and "cpu_ms" in s]
        for s in sorted(samples, key=lambda s: -s["cpu_ms"])[: args.slowest]:
            print(
                f"  - gen{s['generation']} in {s['thread']}: {s['cpu_ms']} ms CPU, young {s['young']} objects, "
                f"{s['young_referents']} referents, {s['with_finalizer']} with __del__, collected {s['collected']}"
            )
            for kind, n, hint in s["largest"]:
                print(f"      {n:>9} referents  {kind}: {hint[:110]}")
            print(f"      freed: {s['freed']}")
            for name, n, ms in s.get("calls", [])[:6]:
                print(f"      called {n}x {ms} ms  {name[:110]}")


if __name__ == "__main__":
    main()
