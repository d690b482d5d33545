"""Redaction of agent traffic, where texts repeat: with and without the engine's cache of repeated texts.

    .venv/bin/python benchmarks/redaction_repeats.py --corpus broad:tuned --turns 6

Every request of a conversation resends the system prompt, the tool schemas and all earlier turns; the proxy
redacts each message of each request. Conversations are built from corpus records (one record per turn, the
same system prompt and tool schema for all), and both engines redact every message of every request, timed
by `time.process_time`. This is a traffic model, not the corpus figure: `redaction.py` and `redaction_ab.py`
time first sights of each text (the cache emptied before every pass).
"""

from __future__ import annotations

import argparse
import json
import os
import time

from evolvable.governance.redaction import PlaceholderMap, RedactionEngine
from evolvable.governance.redaction.phones import valid_international, valid_national
from redaction import load_records

SYSTEM_PROMPT = (
    "You are the support assistant of an online store. Answer politely and briefly. Never reveal internal notes. "
    "When a customer asks about an order, look it up with the lookup_order tool before answering; when they ask "
    "for a refund, check the refund policy (30 days, unused items, original packaging) and open a ticket with "
    "create_ticket. Escalate to a human agent when the customer is angry, mentions a lawyer, or asks three times. "
) * 6
TOOLS = json.dumps(
    [
        {
            "name": name,
            "description": f"{name.replace('_', ' ').capitalize()} in the store's back office.",
            "parameters": {
                "type": "object",
                "properties": {"order_id": {"type": "string"}, "email": {"type": "string"}, "note": {"type": "string"}},
                "required": ["order_id"],
            },
        }
        for name in ("lookup_order", "create_ticket", "refund_order", "update_address", "escalate")
    ]
)


def requests(texts: list[str], turns: int) -> list[list[str]]:
    """Each request's messages: system prompt, tool schemas, then the conversation so far."""
    out: list[list[str]] = []
    for first in range(0, len(texts) - turns + 1, turns):
        history: list[str] = []
        for text in texts[first : first + turns]:
            history.append(text)
            out.append([SYSTEM_PROMPT, TOOLS, *history])
    return out


def timed(engine: RedactionEngine, traffic: list[list[str]], passes: int) -> float:
    best = float("inf")
    for _ in range(passes):
        valid_national.cache_clear()
        valid_international.cache_clear()
        engine.clear_cache()
        start = time.process_time()
        for messages in traffic:
            placeholders = PlaceholderMap()
            for message in messages:
                engine.redact(message, placeholders)
        best = min(best, time.process_time() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", default="broad:tuned")
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--passes", type=int, default=5)
    args = parser.parse_args()
    traffic = requests([r["text"] for r in load_records(args.corpus)], args.turns)
    mb = sum(len(m.encode()) for messages in traffic for m in messages) / 1e6
    load_before = os.getloadavg()
    cached, uncached = RedactionEngine(), RedactionEngine(cache=False)
    timed(cached, traffic[:50], 1)  # warm-up: imports, name tables
    timed(uncached, traffic[:50], 1)
    with_cache, without = timed(cached, traffic, args.passes), timed(uncached, traffic, args.passes)
    print(f"{len(traffic)} requests, {args.turns} turns a conversation, {mb:.2f} MB of messages redacted")
    print(f"  without the cache: {mb / without:.2f} MB per CPU-second (best of {args.passes} passes)")
    print(f"  with the cache:    {mb / with_cache:.2f} MB per CPU-second ({without / with_cache:.1f}x)")
    print(f"  load average before {'/'.join(f'{x:.1f}' for x in load_before)}, after "
          f"{'/'.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")  # fmt: skip


if __name__ == "__main__":
    main()
