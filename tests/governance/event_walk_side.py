"""One side of `test_redaction_compiled.py`'s event comparison, run in a process of its own: redacts events of
every kind, their free-form fields and identifiers filled from the generated corpora, and prints them as they
would be stored, minus the ids and clock readings each run makes anew.

    python event_walk_side.py BROAD_CORPUS_PY
"""

from __future__ import annotations

import importlib.util
import json
import sys
from typing import Any

from evolvable.governance.redaction import EventRedactor, RedactionEngine, events, native
from evolvable.protocol import models as m

VOLATILE = ("id", "started_at", "created_at")


def corpus_texts(path: str) -> list[str]:
    spec = importlib.util.spec_from_file_location("broad", path)
    assert spec is not None and spec.loader is not None
    broad = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(broad)
    return [r["text"] for r in broad.generate("tuned", 120, 11) + broad.generate("heldout", 120, 12)]


def llm_call(n: int, t: Any) -> m.LLMCallStep:
    arguments = json.dumps({"q": t(n), "password": "hunter2!x"})
    call = {"id": f"call_{n}", "type": "function", "function": {"name": "lookup", "arguments": arguments}}
    return m.LLMCallStep(
        agent=t(n + 1)[:40],
        model="gpt-test",
        response_id=f"resp {t(n + 2)[:30]}",
        tools=[{"name": "lookup", "description": t(n + 3)}],
        sampling={"temperature": 0.2, "user": t(n + 4)},
        metadata={"note": t(n + 5), "n": n},
        request_messages=[
            m.ChatMessage(role="system", content=t(n + 6)),
            m.ChatMessage(role="user", content=[{"type": "text", "text": t(n + 7)}]),
            m.ChatMessage(role="assistant", content=None, tool_calls=[call]),
            m.ChatMessage(role="tool", tool_call_id=f"call_{n}", content=t(n + 8), name="lookup"),
        ],
        choices=[
            m.CompletionChoice(
                message=m.ChatMessage(role="assistant", content=t(n + 9), reasoning_content=t(n + 10)),
                completion_token_ids=[1, 2, 3],
                logprobs=[-0.1, -0.2, -0.3],
            )
        ],
        prompt_token_ids=[4, 5, 6],
    )


def other_steps(n: int, t: Any) -> list[m.Step]:
    return [
        m.ToolCallStep(
            tool_name="lookup",
            tool_call_id=f"call_{n}",
            arguments={"q": t(n + 11)},
            result={"rows": [t(n + 12)]},
            error_message=t(n + 13),
            error_class="E",
        ),
        m.MessageStep(content=t(n + 14)),
        m.HandoffStep(from_agent="a", to_agent=t(n + 15)[:20], reason=t(n + 16), input={"x": t(n + 17)}),
        m.MemoryOpStep(op="write", key=t(n + 18)[:30], items=[t(n + 19)]),
        m.SkillUseStep(skill_name="s", input=t(n + 20), output={"o": t(n + 21)}),
    ]


def trajectory_events(n: int, t: Any) -> list[m.Event]:
    tid = f"traj_{n % 7}"  # trajectories recur: placeholders numbered across their events
    header = m.TrajectoryHeader(
        id=tid, agent=t(n + 22)[:30], task_id=t(n + 23)[:30], task_input={"ask": t(n + 24)}, metadata={"m": t(n + 25)}
    )
    signal = m.Signal(
        kind="outcome", value=1.0, label=t(n + 26)[:40], source=t(n + 27)[:20], metadata={"why": t(n + 28)}
    )
    steps = [llm_call(n, t), *other_steps(n, t)]
    return [
        m.TrajectoryStarted(trajectory_id=tid, header=header, event_id=f"s{n}"),
        *(m.StepAppended(trajectory_id=tid, step=s, event_id=f"e{n}_{i}") for i, s in enumerate(steps)),
        m.SignalAttached(trajectory_id=tid, event_id=f"g{n}", signal=signal),
        m.VersionsNamed(trajectory_id=tid, event_id=f"v{n}", harness_version="h1"),
        m.TrajectoryEnded(
            trajectory_id=tid, event_id=f"x{n}", status=m.TrajectoryStatus.completed, metadata={"end": t(n + 29)}
        ),
    ]


def stored(event: m.Event) -> dict[str, Any]:
    data = event.model_dump(mode="json", exclude={"occurred_at": True, "ended_at": True, "header": {"started_at"}})
    for part in (data.get("step"), data.get("signal")):
        for volatile in VOLATILE:
            (part or {}).pop(volatile, None)
    return data


def main(corpus: str) -> None:
    texts = corpus_texts(corpus)

    def t(i: int) -> str:
        return texts[i % len(texts)]

    redactor = EventRedactor(RedactionEngine())
    out = [stored(e) for n in range(40) for e in redactor.redact_events(trajectory_events(n, t))]
    print(json.dumps({"engine": native.state().engine, "module": events.__file__, "events": out}))


if __name__ == "__main__":
    main(sys.argv[1])
