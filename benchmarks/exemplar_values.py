"""Exemplar placeholders as recorded vs the live conversation's own values: what the small model copies.

The memory lever's exemplars are redacted trajectories (`reset the password for <EMAIL_1>` ->
`{"tool": "reset_password", "args": {"email": "<EMAIL_1>"}}`), and a 135M model copies the placeholder
literally into its own action. `render_messages(..., live_values=...)` shows each placeholder of an
exemplar's assistant turns as the value the live conversation has under the same placeholder (its own
redaction, numbered by first appearance); `live_every_turn` fills the exemplar's user turns too.
This runs the same report tickets, with the same exemplars (oracle runs of train tickets, redacted as the
memory lever serves them, two per intent), under each rendering, greedily, and counts per intent the
successes and the episodes whose actions hold a placeholder literally.

    python benchmarks/exemplar_values.py [--per-intent 3]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import evolvable.workloads.support_desk.agent as agent_module
from evolvable.app.redaction import exemplar_redactor
from evolvable.policy_server.launcher import policy_server
from evolvable.protocol.harness import PLACEHOLDER, Harness, LiveValues, fill_placeholders, render_messages
from evolvable.protocol.models import ChatMessage
from evolvable.workloads.support_desk import default_harness, evaluate, generate_tasks
from evolvable.workloads.support_desk.harnesses import oracle_exemplars
from evolvable.workloads.support_desk.tasks import REGULAR_INTENTS

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_env import write_side_by_side
from exemplar_steps import pick  # the same report tickets per intent as the step-rendering benchmark

RESULTS = Path(__file__).parent / "results" / "exemplar_values.json"


def render_recorded(
    harness: Harness,
    conversation: list[ChatMessage],
    task_text: str | None = None,
    cluster: str | None = None,
    live_values: LiveValues | None = None,
) -> list[ChatMessage]:
    """The previous rendering: exemplars with their placeholders as recorded."""
    return render_messages(harness, conversation, task_text=task_text, cluster=cluster)


def render_every_turn(
    harness: Harness,
    conversation: list[ChatMessage],
    task_text: str | None = None,
    cluster: str | None = None,
    live_values: LiveValues | None = None,
) -> list[ChatMessage]:
    """A variant: live values in every exemplar turn, the ticket and the tool results included."""
    out = render_messages(harness, conversation, task_text=task_text, cluster=cluster)
    dialogue = [m for m in conversation if m.role not in ("system", "developer")]
    shown = out[1 : len(out) - len(dialogue)]
    if live_values is None or not any(PLACEHOLDER.search(m.text()) for m in shown):
        return out
    values = live_values(dialogue)
    filled = [m.model_copy(update={"content": fill_placeholders(m.text(), values)}) for m in shown]
    return [out[0], *filled, *out[len(out) - len(dialogue) :]]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--per-intent", type=int, default=3, help="Report tickets per intent.")
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--max-turns", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=12)
    parser.add_argument("--arms", default="recorded,live", help="Of recorded, live (assistant turns), live_every_turn.")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    started, load_start = time.perf_counter(), os.getloadavg()
    redact = exemplar_redactor()
    memory = [redact(ex) for ex in oracle_exemplars(pick(generate_tasks("train", 60, seed=7), 2))]
    report = pick(generate_tasks("holdout", 120, seed=11), args.per_intent)
    harness = default_harness(memory=memory)
    arms: dict[str, dict[str, Any]] = {}
    with policy_server(args.model, max_batch=16) as endpoint:
        arms_to_run = {"recorded": render_recorded, "live": render_messages, "live_every_turn": render_every_turn}
        for name in args.arms.split(","):
            render = arms_to_run[name]
            vars(agent_module)["render_messages"] = render  # the agent's own reference: both arms run the same loop
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
            literal: Counter[str] = Counter()
            for episode in result.episodes:
                actions = [json.dumps(t.args) for t in episode.turns if t.args]
                if any(PLACEHOLDER.search(a) for a in actions):
                    literal[episode.intent] += 1
            arms[name] = {
                "success": result.success_rate,
                "by_intent": {k: [v.successes, v.n] for k, v in result.per_intent.items()},
                "placeholder_in_action": dict(literal),
                "errors": result.errors,
            }
            print(f"{name:8s} {result.success_rate:.0%} (errors {result.errors})", flush=True)
            for intent in REGULAR_INTENTS:
                wins, n = arms[name]["by_intent"].get(intent, [0, 0])
                print(f"  {intent:22s} {wins}/{n}  placeholder copied in {literal[intent]}", flush=True)
    vars(agent_module)["render_messages"] = render_messages
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
