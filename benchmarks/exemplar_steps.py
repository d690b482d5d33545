"""Whole exemplars vs exemplars shown up to the conversation's step: what the small model copies.

The memory lever's exemplars are whole episodes (ticket, action, result, ..., final answer). Rendered
whole before a new ticket, the most recent assistant turn the model sees is the exemplar's final answer,
and a 135M model copies that turn: it answers at once and skips the work. `render_messages` now shows
each exemplar only up to the step the live conversation has reached (`exemplar_up_to_step`). This runs
the same report tickets, with the same exemplars (oracle runs of train tickets, redacted as the memory
lever serves them, two per intent), under both renderings, greedily, and counts per intent what the
first action was and whether the ticket succeeded.

    python benchmarks/exemplar_steps.py [--per-intent 3]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from pathlib import Path

import evolvable.workloads.support_desk.agent as agent_module
from evolvable.app.redaction import exemplar_redactor
from evolvable.policy_server.launcher import policy_server
from evolvable.protocol.harness import Harness, LiveValues, render_messages, render_system_prompt, retrieve_memory
from evolvable.protocol.models import ChatMessage
from evolvable.workloads.support_desk import default_harness, evaluate, generate_tasks
from evolvable.workloads.support_desk.harnesses import oracle_exemplars
from evolvable.workloads.support_desk.tasks import REGULAR_INTENTS

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_env import write_side_by_side

RESULTS = Path(__file__).parent / "results" / "exemplar_steps.json"


def render_whole(
    harness: Harness,
    conversation: list[ChatMessage],
    task_text: str | None = None,
    cluster: str | None = None,
    live_values: LiveValues | None = None,
) -> list[ChatMessage]:
    """The previous rendering: every retrieved exemplar whole, whatever the conversation's step (with its
    placeholders as recorded, as then)."""
    if task_text is None:
        task_text = next((m.text() for m in conversation if m.role == "user"), "")
    out = [ChatMessage(role="system", content=render_system_prompt(harness, cluster))]
    for ex in retrieve_memory(harness, task_text, cluster):
        out.extend(ex.messages)
    out.extend(m for m in conversation if m.role not in ("system", "developer"))
    return out


def pick(tasks: list, per_intent: int) -> list:
    counts: Counter[str] = Counter()
    out = []
    for task in tasks:
        if counts[task.intent] < per_intent:
            counts[task.intent] += 1
            out.append(task)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--per-intent", type=int, default=3, help="Report tickets per intent.")
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--max-turns", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=12)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    started, load_start = time.perf_counter(), os.getloadavg()
    redact = exemplar_redactor()
    memory = [redact(ex) for ex in oracle_exemplars(pick(generate_tasks("train", 60, seed=7), 2))]
    report = pick(generate_tasks("holdout", 120, seed=11), args.per_intent)
    harness = default_harness(memory=memory)
    arms: dict[str, dict[str, object]] = {}
    with policy_server(args.model, max_batch=16) as endpoint:
        for name, render in (("whole", render_whole), ("step", render_messages)):
            agent_module.render_messages = render  # the agent's own reference: both arms run the same loop
            result = evaluate(
                report,
                endpoint,
                args.model,
                harness,
                concurrency=args.concurrency,
                max_turns=args.max_turns,
                max_tokens=args.max_tokens,
                timeout_s=1800.0,
            )
            first = {i: Counter() for i in REGULAR_INTENTS}
            for episode in result.episodes:
                first[episode.intent][(episode.turns[0].tool or "unparsed") if episode.turns else "none"] += 1
            arms[name] = {
                "success": result.success_rate,
                "by_intent": {k: [v.successes, v.n] for k, v in result.per_intent.items()},
                "first_action": {k: dict(v) for k, v in first.items()},
                "errors": result.errors,
            }
            print(f"{name:6s} {result.success_rate:.0%} (errors {result.errors})", flush=True)
            for intent in REGULAR_INTENTS:
                wins, n = arms[name]["by_intent"].get(intent, [0, 0])  # type: ignore[union-attr]
                print(f"  {intent:22s} {wins}/{n}  first action {dict(first[intent])}", flush=True)
    agent_module.render_messages = render_messages
    write_side_by_side(
        args.out,
        args,
        {
            "arms": arms,
        },
        started,
        load_start,
    )


if __name__ == "__main__":
    main()
