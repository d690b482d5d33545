"""CPU cost of the wire adapters alone, in-process: a Responses / Messages request translated to chat, a
chat reply translated back, and a 64-chunk chat stream translated event by event. Best of several
repeats, so the figure holds on a loaded machine (end-to-end latency there does not).

    .venv/bin/python benchmarks/wire_translation.py

Writes benchmarks/results/wire_translation.json and prints a table.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from evolvable.proxy.wire import messages, responses

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_env import LoadMonitor, describe, environment

RESULTS = Path(__file__).resolve().parent / "results" / "wire_translation.json"
SYSTEM = "You are a support agent for an online shop. Answer briefly."
USER = "Where is my order A-1? I ordered it last week and have not heard back."
REQUESTS = {
    "responses": {"model": "mock", "instructions": SYSTEM, "input": USER, "max_output_tokens": 64, "stream": True},
    "messages": {
        "model": "mock",
        "system": SYSTEM,
        "messages": [{"role": "user", "content": USER}],
        "max_tokens": 64,
        "stream": True,
    },
}
REPLY = {
    "id": "c1",
    "model": "mock",
    "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "word " * 64}}],
    "usage": {"prompt_tokens": 30, "completion_tokens": 64, "total_tokens": 94},
}


def chat_stream(chunks: int) -> bytes:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        body = {
            "id": "c1",
            "object": "chat.completion.chunk",
            "model": "mock",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        return b"data: " + json.dumps(body).encode() + b"\n\n"

    return b"".join([chunk({"content": "word "}) for _ in range(chunks)] + [chunk({}, "stop"), b"data: [DONE]\n\n"])


def best_us(fn: Callable[[], Any], number: int = 200, repeats: int = 7) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - t0) / number)
    return best * 1e6


def measure() -> dict[str, Any]:
    stream = chat_stream(64)
    rows: dict[str, Any] = {}
    for name, module in (("responses", responses), ("messages", messages)):
        body = REQUESTS[name]
        request = module.parse(body)

        def translate_stream(module: Any = module, request: Any = request) -> None:
            translator = module.StreamTranslator("x_1", request)
            translator.start()
            for i in range(0, len(stream), 160):  # network-sized pieces
                translator.feed(stream[i : i + 160])
            translator.finish()

        rows[name] = {
            "request_us": best_us(lambda module=module, body=body: module.parse(body)),
            "reply_us": best_us(lambda module=module, request=request: module.reply(REPLY, "x_1", request)),
            "stream_64_chunks_us": best_us(translate_stream, number=50),
        }
    return {"adapters": rows}


def main() -> None:
    with LoadMonitor() as monitor:
        results = measure()
    results["load_average"] = monitor.summary()
    results["environment"] = environment(results["load_average"])
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2))
    print(f"{'protocol':<10} {'request->chat µs':>17} {'reply->wire µs':>15} {'64-chunk stream µs':>19}")
    for name, row in results["adapters"].items():
        print(f"{name:<10} {row['request_us']:>17.1f} {row['reply_us']:>15.1f} {row['stream_64_chunks_us']:>19.1f}")
    print(describe(results["load_average"]))


if __name__ == "__main__":
    main()
