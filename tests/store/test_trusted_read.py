"""Reads rebuild stored trajectories without validating them again (`store.trusted`): the objects must be
exactly those validation builds (same types down to the leaves, same fields set, same extras), and data the
store would not have written falls back to validation and its errors."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import orjson
import pytest
from pydantic import BaseModel, ValidationError

from evolvable.protocol.models import (
    ChatMessage,
    CompletionChoice,
    ErrorInfo,
    LLMCallStep,
    MessageStep,
    Signal,
    SignalAttached,
    StepAppended,
    ToolCallStep,
    Trajectory,
    TrajectoryEnded,
    TrajectoryStatus,
    VersionsNamed,
    events_for,
)
from evolvable.store import Store, TrajectoryFilter, rows, trusted


def assert_identical(trusted_value: Any, validated: Any, path: str = "") -> None:
    """Equal, and built alike: same types at every level (tzinfo included), fields set and extras of models."""
    assert type(trusted_value) is type(validated), f"{path}: {type(trusted_value)} != {type(validated)}"
    if isinstance(validated, BaseModel):
        assert trusted_value.__pydantic_fields_set__ == validated.__pydantic_fields_set__, path
        assert trusted_value.__pydantic_private__ == validated.__pydantic_private__, path
        assert list(trusted_value.__dict__) == list(validated.__dict__), path
        for name, value in validated.__dict__.items():
            assert_identical(trusted_value.__dict__[name], value, f"{path}.{name}")
        assert_identical(trusted_value.__pydantic_extra__, validated.__pydantic_extra__, f"{path}.<extra>")
    elif isinstance(validated, dict):
        assert list(trusted_value) == list(validated), path
        for key, value in validated.items():
            assert_identical(trusted_value[key], value, f"{path}[{key!r}]")
    elif isinstance(validated, list | tuple):
        assert len(trusted_value) == len(validated), path
        for i, (a, b) in enumerate(zip(trusted_value, validated, strict=True)):
            assert_identical(a, b, f"{path}[{i}]")
    elif isinstance(validated, datetime):
        assert trusted_value == validated and trusted_value.utcoffset() == validated.utcoffset(), path
        assert type(trusted_value.tzinfo) is type(validated.tzinfo), f"{path}: tzinfo"
    elif isinstance(validated, float) and math.isnan(validated):
        assert math.isnan(trusted_value), path
    else:
        assert trusted_value == validated, path


def _validated(header: rows.TrajectoryRow, steps: list[tuple[str, str]], signals: list[tuple[str | None, str]]) -> Any:
    known = {step_id for step_id, _ in steps}
    kept = [text for step_id, text in signals if step_id is None or step_id in known]
    return rows.validate_assembled(rows.header_fields(header), [text for _, text in steps], kept)


@pytest.fixture
def both_reads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Trajectory, Trajectory]]:
    """Every trajectory `assemble` builds in the test, paired with what validation builds from the same rows."""
    pairs: list[tuple[Trajectory, Trajectory]] = []
    real = rows.assemble

    def spy(header: Any, steps: Any, signals: Any) -> Trajectory:
        steps, signals = list(steps), list(signals)
        built = real(header, steps, signals)
        pairs.append((built, _validated(header, steps, signals)))
        return built

    monkeypatch.setattr(rows, "assemble", spy)
    monkeypatch.setattr("evolvable.store.store.assemble", spy)
    return pairs


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


def test_trusted_reads_build_exactly_what_validation_builds(
    store: Store, make_trajectory: Any, both_reads: list[tuple[Trajectory, Trajectory]]
) -> None:
    originals = [_varied(make_trajectory, i) for i in range(30)]
    store.apply_events([e for t in originals for e in events_for(t)])
    # Rows that differ from a put: a placeholder (no start yet), late data, ends and versions after the fact.
    running = make_trajectory(status=TrajectoryStatus.running)
    store.apply_events([e for e in events_for(running) if e.type != "trajectory_started"])
    store.apply_events(
        [
            TrajectoryEnded(trajectory_id=originals[0].id, status=TrajectoryStatus.failed, metadata={"why": "x"}),
            VersionsNamed(trajectory_id=originals[1].id, policy_version="p9"),
            SignalAttached(
                trajectory_id=originals[2].id, signal=Signal(kind="user_feedback", value=1, step_id="later")
            ),
            StepAppended(trajectory_id=originals[3].id, step=MessageStep(content="late")),
        ]
    )
    loaded = list(store.iter_trajectories(TrajectoryFilter(), batch_size=7))
    loaded.append(store.get_trajectory(originals[4].id))
    assert len(both_reads) == len(originals) + 2 == len(loaded)
    for built, validated in both_reads:
        assert_identical(built, validated, built.id)
        assert built == validated
        assert built.model_dump() == validated.model_dump()
        assert built.model_dump_json() == validated.model_dump_json()
    by_id = {t.id: t for t in loaded}
    for original in originals[5:]:  # (the same steps, but for the NUL, which the store writes as U+FFFD)
        stored = [s.model_dump_json() for s in by_id[original.id].steps]
        assert stored == [s.model_dump_json().replace("\\u0000", "\ufffd") for s in original.steps]
        assert by_id[original.id].started_at == original.started_at
    assert by_id[running.id].steps == running.steps  # the placeholder's steps, with its defaults for the header


def test_trusted_models_behave_like_validated_ones(
    store: Store, make_trajectory: Any, both_reads: list[tuple[Trajectory, Trajectory]]
) -> None:
    """Fields set (exclude_unset), extras, assignment validation and copies work on the rebuilt objects."""
    t = _varied(make_trajectory, 1)
    store.put_trajectory(t)
    loaded = store.get_trajectory(t.id)
    assert loaded.model_dump(exclude_unset=True) == both_reads[0][1].model_dump(exclude_unset=True)
    assert loaded.model_dump_json(exclude_defaults=True) == both_reads[0][1].model_dump_json(exclude_defaults=True)
    message = loaded.llm_calls()[-1].request_messages[0]
    assert message.model_extra == {"x_vendor": 1}
    with pytest.raises(ValidationError):
        loaded.steps[0].started_at = "not a time"  # type: ignore[assignment]
    loaded.metadata["more"] = 1
    assert store.get_trajectory(t.id).metadata == t.metadata  # nothing shared with another read


def _rows_of(t: Trajectory) -> tuple[dict[str, Any], list[str], list[str]]:
    header = {**rows.header_row(t.header())}
    header["header"] = dict(header["header"])
    steps = [str(rows.step_row(t.id, s)["body"]) for s in t.steps]  # (text, as the database returns it)
    signals = [str(rows.signal_row(t.id, g)["body"]) for g in t.signals]
    return rows.header_fields(header), steps, signals


@pytest.mark.parametrize(
    ("where", "edit", "error"),
    [
        ("step", lambda body: body.replace('"kind":"message"', '"kind":"message","surprise":1'), ValidationError),
        ("step", lambda body: body.replace('"kind":"message"', '"kind":"unheard_of"'), ValidationError),
        ("signal", lambda body: body.replace('"kind":"tool_error"', '"kind":"mood"'), ValidationError),
        ("header", lambda fields: {**fields, "schema_version": "9.0.0"}, ValidationError),
        ("header", lambda fields: {**fields, "surprise": 1}, ValidationError),
    ],
)
def test_data_the_store_would_not_write_is_validated(make_trajectory: Any, where: str, edit: Any, error: Any) -> None:
    header, steps, signals = _rows_of(make_trajectory())
    trusted.trajectory(dict(header), steps, signals)  # (as written, the rows are trusted)
    if where == "step":
        steps[0] = edit(steps[0])
    elif where == "signal":
        signals[0] = edit(signals[0])
    else:
        header = edit(header)
    with pytest.raises(trusted.Untrusted):
        trusted.trajectory(dict(header), steps, signals)
    with pytest.raises(error):
        rows.validate_assembled(header, steps, signals)
    with pytest.raises(error):  # what a read of such rows raises: the trusted read falls back to validation
        rows.assemble(
            {**header, "header": header}, [(str(i), s) for i, s in enumerate(steps)], [(None, g) for g in signals]
        )


def test_every_model_a_trajectory_holds_has_a_builder() -> None:
    """A new field type or validator on an ATDP model fails here until the trusted read accounts for it."""
    seen: set[type[BaseModel]] = set()
    pending: list[type[BaseModel]] = [Trajectory]
    while pending:
        cls = pending.pop()
        if cls in seen:
            continue
        seen.add(cls)
        if cls is not Trajectory:
            trusted.builder(cls)
        for field in cls.__pydantic_fields__.values():
            pending += [t for t in _models_in(field.annotation) if t not in seen]
    assert {c.__name__ for c in seen} >= {"LLMCallStep", "CompletionChoice", "ChatMessage", "ToolCall", "Signal"}


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    from typing import get_args

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in get_args(annotation) for m in _models_in(arg)]


def test_header_times_come_back_in_utc_like_validation(make_trajectory: Any) -> None:
    header, steps, signals = _rows_of(make_trajectory(started_at=datetime(2026, 1, 1, tzinfo=UTC)))
    built = trusted.trajectory(dict(header), steps, signals)
    assert_identical(built, rows.validate_assembled(header, steps, signals))


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
