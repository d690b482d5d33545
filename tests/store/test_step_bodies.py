"""Step and signal bodies are written by orjson (`rows.dumps_model`), a third of pydantic's serializer CPU:
the documents must be the ones pydantic writes, values orjson would write differently are left to pydantic,
and what is stored reads back as the same models."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import orjson
import pytest
from pydantic import BaseModel

from evolvable.protocol.models import (
    ChatMessage,
    CompletionChoice,
    ErrorInfo,
    LLMCallStep,
    Signal,
    ToolCallStep,
    Trajectory,
    events_for,
)
from evolvable.store import Store, rows


def _varied(make_trajectory: Any, i: int) -> Trajectory:
    """Every step kind, and values whose decoding validation changes: offsets, naive times, enums, int floats,
    provider fields on OpenAI-shaped messages, redacted spans, errors, NULs."""
    t: Trajectory = make_trajectory(
        started_at=datetime(2026, 11, 1, 12, 0, tzinfo=timezone(timedelta(hours=i % 5 - 2))),
        end_user=f"user{i}" if i % 2 else None,
        harness_version="h1" if i % 3 else None,
        task_id=f"task-{i}",
    )
    odd = LLMCallStep(
        model="m",
        started_at=datetime(2026, 11, 2, 8, 30, 0, 250 * i),  # naive: stays naive
        ended_at=datetime(2026, 11, 2, 8, 30, 1, tzinfo=timezone(timedelta(hours=5, minutes=30))),
        request_messages=[
            ChatMessage.model_validate({"role": "user", "content": [{"type": "text", "text": "hi"}], "x_vendor": i}),
            ChatMessage(role="tool", content="done\x00", tool_call_id="c1", name="lookup"),
        ],
        choices=[
            CompletionChoice(
                index=0,
                message=ChatMessage(role="assistant", content="ok [NAME]"),
                finish_reason="stop",
                completion_token_ids=[5, 6, 7, 8],
                logprobs=[-0.5, 0.0, 0.0, -1.25],
                redacted_token_spans=[(1, 3)],
            )
        ],
        latency_ms=float(i),  # an integral float
        status="error",
        error=ErrorInfo(type="upstream", message="503", status_code=503),
        metadata={"nested": {"a": [1, 2.5, None, True]}, "n": i},
    )
    tool = ToolCallStep(tool_name="t", arguments='{"raw": 1}', result=[1, "two", {"3": 4.0}], status="ok")
    return t.model_copy(
        update={
            "steps": [*t.steps, odd, tool],
            "signals": [*t.signals, Signal(kind="judge", value=0.0, step_id=odd.id, confidence=0.5)],
        }
    )


# --------------------------------------------------------------------------- the write side: bodies by orjson


def _all_models(t: Trajectory) -> list[BaseModel]:
    return [*t.steps, *t.signals]


def test_bodies_written_by_orjson_are_the_documents_pydantic_writes(make_trajectory: Any) -> None:
    for i in range(6):
        for model in _all_models(_varied(make_trajectory, i)):
            assert orjson.loads(rows.dumps_model(model)) == orjson.loads(model.model_dump_json()), model
            assert type(model).model_validate_json(rows.dumps_model(model)) == model


@pytest.mark.parametrize("odd", [{1, 2}, b"bytes", Decimal("1.5"), timedelta(seconds=3), 2**70, {1: "int key"}])
def test_values_orjson_would_write_differently_are_left_to_pydantic(odd: Any) -> None:
    """Anything but JSON types and our own models inside a body: pydantic writes the whole body, as before."""
    step = ToolCallStep(tool_name="t", result={"odd": odd, "also": [odd]})
    assert rows.dumps_model(step) == step.model_dump_json()


def test_bodies_by_orjson_read_back_as_the_models_written(store: Store, make_trajectory: Any) -> None:
    originals = [_varied(make_trajectory, i) for i in range(40)]  # (40: bulk batches, COPY on PostgreSQL)
    store.apply_events([e for t in originals for e in events_for(t)])
    for t in originals:
        stored = store.get_trajectory(t.id)
        # (the same steps, but for the NUL, which the store writes as U+FFFD)
        assert [s.model_dump_json() for s in stored.steps] == [
            s.model_dump_json().replace("\\u0000", "\ufffd") for s in t.steps
        ]
        assert stored.signals == t.signals
