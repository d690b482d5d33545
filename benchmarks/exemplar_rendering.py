"""Do redacted exemplars still teach the small model? The memory lever's exemplars, rendered four ways.

Exploration (the memory lever's search) finds verified successes on support-desk train tickets with the
default harness on the embedded model. Those exemplars are then rendered as

    none          no exemplars (the default harness alone)
    raw           as found, customer names, emails and addresses included (never served: the baseline)
    placeholders  redacted with placeholders (`<EMAIL_1>`, `<ADDRESS_1>`): what the memory lever serves
                  (app/redaction.py; one placeholder map per exemplar)
    surrogates    redacted, then each placeholder of a personal kind swapped for a fictitious value of the
                  same shape (`customer1@example.com`, `1 Example Street`), consistently

and each harness answers the same report tickets (the demo's report set and the gate's tickets) greedily.
Per intent counts show where a rendering helps or hurts.

    python benchmarks/exemplar_rendering.py [--train 24 --report 60]
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path

from evolvable.app.redaction import exemplar_redactor
from evolvable.policy_server.launcher import policy_server
from evolvable.protocol.harness import MemoryExemplar
from evolvable.workloads.support_desk import default_harness, evaluate, generate_tasks
from evolvable.workloads.support_desk.replay import SupportDeskRunner

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_env import write_side_by_side

RESULTS = Path(__file__).parent / "results" / "exemplar_rendering.json"
PLACEHOLDER = re.compile(r"<(EMAIL|PERSON|ADDRESS|PHONE)_(\d+)>")
STAND_INS: dict[str, Callable[[int], str]] = {
    "EMAIL": lambda n: f"customer{n}@example.com",
    "PERSON": lambda n: "Customer" if n == 1 else f"Customer {n}",
    "ADDRESS": lambda n: f"{n} Example Street",
    "PHONE": lambda n: f"+1 555 0100 {n:03d}",
}


def with_stand_ins(exemplar: MemoryExemplar) -> MemoryExemplar:
    """The redacted exemplar with fictitious values for its personal placeholders (the same one each time)."""

    def swap(text: str) -> str:
        return PLACEHOLDER.sub(lambda m: STAND_INS[m.group(1)](int(m.group(2))), text)

    return exemplar.model_copy(
        update={
            "task_input": swap(exemplar.task_input),
            "messages": [m.model_copy(update={"content": swap(m.text())}) for m in exemplar.messages],
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--train", type=int, default=24, help="Train tickets exploration searches.")
    parser.add_argument("--report", type=int, default=60, help="Report tickets per arm.")
    parser.add_argument("--per-intent", type=int, default=2, help="Exemplars kept per intent.")
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--max-turns", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    started = time.perf_counter()
    load_start = os.getloadavg()
    train = generate_tasks("train", args.train, seed=7)
    report = generate_tasks("holdout", args.report, seed=7)
    with policy_server(args.model, max_batch=16) as endpoint:
        runner = SupportDeskRunner(
            endpoint, args.model, concurrency=16, max_turns=args.max_turns, max_tokens=args.max_tokens
        )
        found = runner.explore(default_harness(), None, train)
        redact = exemplar_redactor()
        kept: dict[str, int] = {}
        raw = []
        for ex in found.exemplars:
            if kept.get(ex.cluster or "", 0) < args.per_intent:
                kept[ex.cluster or ""] = kept.get(ex.cluster or "", 0) + 1
                raw.append(ex)
        renderings = {
            "none": [],
            "raw": raw,
            "placeholders": [redact(ex) for ex in raw],
            "surrogates": [with_stand_ins(redact(ex)) for ex in raw],
        }
        arms = {}
        for name, memory in renderings.items():
            harness = default_harness(memory=memory)  # memory_k 2, as the memory lever leaves it
            result = evaluate(
                report,
                endpoint,
                args.model,
                harness,
                concurrency=24,
                max_turns=args.max_turns,
                max_tokens=args.max_tokens,
            )
            by_intent = {k: [v.successes, v.n] for k, v in result.per_intent.items()}
            arms[name] = {"success": result.success_rate, "by_intent": by_intent}
            print(
                f"{name:13s} {result.success_rate:.0%}  "
                + ", ".join(f"{k} {s}/{n}" for k, (s, n) in sorted(by_intent.items()))
            )
    write_side_by_side(
        args.out,
        args,
        {
            "exploration": found.to_dict(),
            "exemplars": {ex.cluster: ex.messages[0].text()[:200] for ex in renderings["surrogates"]},
            "placeholder_examples": {
                ex.cluster: [m.text()[:200] for m in ex.messages[:3]] for ex in renderings["placeholders"]
            },
            "arms": arms,
        },
        started,
        load_start,
    )


if __name__ == "__main__":
    main()
