"""`build_llm_step` validates a call's step once, messages, choices and usage included, as plain data; when that
fails it builds the step part by part (`llm_step_in_parts`), which leaves out what cannot be parsed. Both must
make the same step of every call record: these tests build random records with every field the conversion reads,
well-formed and not (messages of unknown roles, choices and usage that do not parse, token ids and logprobs that
do not align, errors, streams, completions prompts), and compare the two ways field by field, in their JSON dumps
and in the fields each step says were set."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from typing import Any

import msgspec
import orjson
import pytest
from pydantic import ValidationError

from evolvable.protocol.models import (
    LLMCallStep,
    StepAppended,
    StepStatus,
    TrajectoryHeader,
    TrajectoryStarted,
    TrajectoryStatus,
)
from evolvable.proxy import capture
from evolvable.proxy.capture import Converter, build_llm_step, llm_step_in_parts
from evolvable.proxy.records import CallRecord, SessionRecord, decode, encode

RECORDS = 1500


def _message(rng: random.Random) -> Any:
    kind = rng.random()
    if kind < 0.04:
        return "not a message"
    role = rng.choice(
        ["system", "user", "assistant", "tool", "developer", "user", "critic"]
        if kind < 0.1
        else ["system", "user", "assistant", "tool"]
    )
    message: dict[str, Any] = {"role": role}
    if rng.random() < 0.9:
        message["content"] = rng.choice(
            ["Where is order A-1?", "", None, [{"type": "text", "text": "hi"}], "mail a@example.com", 5]
            if kind < 0.15
            else ["Where is order A-1?", "", None, [{"type": "text", "text": "hi"}], "mail a@example.com"]
        )
    if role == "assistant" and rng.random() < 0.4:
        message["tool_calls"] = [
            {"id": f"call_{i}", "type": "function", "function": {"name": "lookup", "arguments": '{"id": 1}'}}
            for i in range(rng.randint(1, 2))
        ]
        if kind < 0.2:
            message["tool_calls"].append({"id": 7, "function": {}})
    if role == "tool":
        message["tool_call_id"] = rng.choice(["call_0", "call_1", None])
    if rng.random() < 0.2:
        message["name"] = rng.choice(["agent", None])
    if rng.random() < 0.1:
        message["provider_extra"] = {"cache": True}
    return message


def _logprobs(rng: random.Random, n: int) -> Any:
    return rng.choice(
        [
            None,
            {"content": [{"token": "x", "logprob": -0.5} for _ in range(n)]},
            {"content": [{"token": "x", "logprob": -1} for _ in range(n)]},
            {"content": [{"token": "x"} for _ in range(n)]},
            {"content": [{"token": "x", "logprob": "bad"} for _ in range(n)]},
            {"token_logprobs": [-0.1 if i % 3 else None for i in range(n)]},
            {"content": [{"logprob": -0.2}] * (n + 1)},
            "not logprobs",
        ]
    )


def _choice(rng: random.Random, chat: bool) -> Any:
    if rng.random() < 0.03:
        return ["not", "a", "choice"]
    n = rng.randint(0, 4)
    choice: dict[str, Any] = {"index": rng.choice([0, 1, 2, "1", None, -1, 1.5]) if rng.random() < 0.1 else 0}
    if chat:
        choice["message"] = rng.choice(
            [
                {"role": "assistant", "content": "It shipped."},
                {"content": "no role"},
                {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "function": {"name": "f"}}]},
                {"role": "robot", "content": "?"},
                "a string",
            ]
        )
    else:
        choice["text"] = rng.choice(["done", None, 3])
    choice["finish_reason"] = rng.choice(["stop", "length", None, 5])
    if rng.random() < 0.5:
        choice["token_ids"] = rng.choice([list(range(n)), [1, "x"], None, list(range(n + 1))])
        choice["logprobs"] = _logprobs(rng, n)
    if rng.random() < 0.1:
        choice["prompt_token_ids"] = rng.choice([[1, 2, 3], "ids"])
    return choice


def _usage(rng: random.Random) -> Any:
    return rng.choice(
        [
            None,
            {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12},
            {"prompt_tokens": "9", "completion_tokens": 3.7},
            {"prompt_tokens": -1},
            {"prompt_tokens": "many"},
            {"prompt_tokens": [1]},
            "usage",
            {},
        ]
    )


def _reply(rng: random.Random, chat: bool) -> Any:
    if rng.random() < 0.05:
        return rng.choice(["not a reply", [1, 2], None])
    reply: dict[str, Any] = {
        "id": rng.choice(["chatcmpl-1", 7, None]),
        "model": rng.choice(["served", None, ""]),
        "choices": [_choice(rng, chat) for _ in range(rng.choice([0, 1, 1, 1, 2]))],
    }
    if rng.random() < 0.9:
        reply["usage"] = _usage(rng)
    if rng.random() < 0.2:
        reply["prompt_token_ids"] = rng.choice([[1, 2], None, "x"])
    return reply


def _stream(rng: random.Random) -> str:
    chunks = [{"id": "chatcmpl-s", "model": "served", "choices": [{"index": 0, "delta": {"role": "assistant"}}]}]
    for word in ("It ", "shipped", "."):
        chunks.append({"choices": [{"index": 0, "delta": {"content": word}, "token_ids": [len(word)]}]})
    chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": _usage(rng)})
    lines = [f"data: {orjson.dumps(c).decode()}" for c in chunks]
    if rng.random() < 0.2:
        lines.insert(2, "data: {not json")
    return "\n\n".join([*lines, "data: [DONE]"]) + "\n\n"


def random_record(rng: random.Random, i: int) -> CallRecord:
    chat = rng.random() < 0.85
    request: dict[str, Any] = {"model": rng.choice(["mock", "alias", None]), "temperature": 0.2}
    if chat:
        if rng.random() < 0.03:
            request["messages"] = rng.choice(["not a list", {"role": "user"}])
        else:
            request["messages"] = [_message(rng) for _ in range(rng.randint(0, 4))]
    else:
        request["prompt"] = rng.choice(["Say hi", ["a", "b"], None, {"x": 1}])
    if rng.random() < 0.2:
        request["tools"] = [{"type": "function", "function": {"name": "lookup"}}]
    if rng.random() < 0.2:
        request["return_token_ids"] = True
    rid = f"req_{i}"
    record = CallRecord(
        id=rid,
        request_id=rid,
        trajectory_id=f"traj_{i}",
        session_id=rng.choice([None, f"traj_{i}"]),
        agent=rng.choice(["support", None]),
        endpoint="chat" if chat else "completions",
        request=request,
        injected=rng.choice([[], ["return_token_ids"]]),
        upstream=rng.choice(["mock", None]),
        client_model=rng.choice([None, "alias"]),
        harness_version=rng.choice([None, "h1"]),
        sub_agent=rng.random() < 0.1,
        stream=rng.random() < 0.2,
        started=rng.choice([1_760_000_000.5, 1_760_000_100.25]),  # (a record without one is stamped now: differs)
        latency_ms=rng.choice([12.5, 12.5, 12.5, 12.5, None, 0.0, -3.0 if rng.random() < 0.2 else 1.0]),
        ttft_ms=rng.choice([None, 2.0]),
        wire=rng.choice([None, {"protocol": "responses", "response_id": "resp_1"}]),
    )
    if record.stream and chat and rng.random() < 0.7:
        record.sse = _stream(rng)
    else:
        record.reply = _reply(rng, chat)
    if rng.random() < 0.1:
        failed = {"type": "upstream_error", "message": "boom", "status": 502}
        record.error = rng.choice([failed, failed, {"message": 5}, {"status": "x"} if rng.random() < 0.3 else failed])
    return decode(encode(record))  # as the writer reads it: through the spool's codec  # type: ignore[return-value]


def _outcome(build: Any, record: CallRecord) -> tuple[str, Any]:
    try:
        step = build(record)
    except Exception as err:  # the two ways must fail alike, whatever the error
        return "error", type(err)
    return "step", step


def _same(a: LLMCallStep, b: LLMCallStep) -> None:
    assert a == b
    assert a.model_dump(mode="json") == b.model_dump(mode="json")
    assert a.model_fields_set == b.model_fields_set
    for x, y in zip(a.request_messages, b.request_messages, strict=True):
        assert x.model_fields_set == y.model_fields_set and x.__pydantic_extra__ == y.__pydantic_extra__
    for x, y in zip(a.choices, b.choices, strict=True):
        assert x.model_fields_set == y.model_fields_set


def test_one_pass_and_in_parts_make_the_same_step_of_every_record() -> None:
    rng = random.Random(20261127)
    one_pass = in_parts_only = errors = 0
    for i in range(RECORDS):
        record = random_record(rng, i)
        expected = _outcome(llm_step_in_parts, record)
        got = _outcome(build_llm_step, record)
        assert got[0] == expected[0], (record, got, expected)
        if got[0] == "error":
            assert got[1] is expected[1]
            errors += 1
            continue
        _same(got[1], expected[1])
        try:
            direct = capture._llm_step_in_one_pass(record, *capture._call_fields(record))
        except (ValidationError, TypeError, ValueError):
            in_parts_only += 1
            continue
        _same(direct, expected[1])
        one_pass += 1
    # The random records must exercise both ways (and a few records neither can convert).
    assert one_pass > RECORDS // 4, one_pass
    assert in_parts_only > RECORDS // 4, in_parts_only
    assert errors < RECORDS // 20, errors


def test_a_step_validated_in_one_pass_keeps_what_the_parts_would(monkeypatch: pytest.MonkeyPatch) -> None:
    """The usual call goes the one-pass way, and it gives the step the parts give (token ids and logprobs kept,
    the proxy's injected field left out of the sampling, the reply's model and usage taken)."""
    rid = "req_usual"
    record = CallRecord(
        id=rid,
        request_id=rid,
        trajectory_id=f"traj_{rid}",
        agent="support",
        request={
            "model": "alias",
            "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Where is A-1?"}],
            "temperature": 0.2,
            "return_token_ids": True,
        },
        injected=["return_token_ids"],
        upstream="vllm",
        started=1_760_000_000.0,
        latency_ms=40.0,
    )
    record.reply = msgspec.Raw(
        orjson.dumps(
            {
                "id": "chatcmpl-9",
                "model": "served",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "Shipped."},
                        "finish_reason": "stop",
                        "token_ids": [11, 12],
                        "logprobs": {"content": [{"token": "a", "logprob": -0.1}, {"token": "b", "logprob": -0.2}]},
                    }
                ],
                "prompt_token_ids": [1, 2, 3],
                "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
            }
        )
    )
    read = decode(encode(record))
    assert isinstance(read, CallRecord)
    parts = llm_step_in_parts(read)
    monkeypatch.setattr(capture, "_llm_step_in_parts", _must_not_fall_back)
    step = build_llm_step(read)
    _same(step, parts)
    assert step.sampling == {"temperature": 0.2}
    assert step.model == "served" and step.usage is not None and step.usage.total_tokens == 5
    assert step.choices[0].completion_token_ids == [11, 12] and step.choices[0].logprobs == [-0.1, -0.2]
    assert step.prompt_token_ids == [1, 2, 3] and step.status == StepStatus.ok


def _must_not_fall_back(*_args: Any) -> LLMCallStep:
    raise AssertionError("a well-formed call fell back to the part-by-part build")


def test_a_message_of_unknown_role_is_left_out_and_counted_as_before() -> None:
    """A call the one pass cannot validate still becomes the step the parts make of it."""
    rid = "req_odd"
    record = CallRecord(
        id=rid,
        request_id=rid,
        trajectory_id=f"traj_{rid}",
        request={"model": "m", "messages": [{"role": "critic", "content": "?"}, {"role": "user", "content": "hi"}]},
        started=1_760_000_000.0,
    )
    record.reply = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}}], "usage": "n/a"}
    with pytest.raises(ValidationError):
        capture._llm_step_in_one_pass(record, *capture._call_fields(record))
    step = build_llm_step(record)
    assert [m.role for m in step.request_messages] == ["user"]
    assert step.metadata["unparsed_messages"] == 1
    assert step.usage is None


def test_converted_events_are_the_same_either_way() -> None:
    """The converter's events (a one-call run's start, validated in one pass with its header, and the step) match
    those made from the parts: the step built part by part, the header from its fields."""
    rng = random.Random(7)
    checked = 0
    for i in range(300):
        record = random_record(rng, i)
        try:
            events = Converter().convert(record)
        except Exception:  # records neither way converts are covered above
            continue
        step = llm_step_in_parts(record)
        assert isinstance(events[-1], StepAppended) and events[-1].step == step
        if record.session_id is None:
            start = events[0]
            assert isinstance(start, TrajectoryStarted)
            header = TrajectoryHeader(
                id=record.trajectory_id,
                tenant_id=record.tenant_id,
                agent=record.agent or "default",
                end_user=record.end_user,
                harness_version=record.harness_version,
                policy_version=record.policy_version,
                task_id=None,
                task_input=None,
                capture=record.capture,
                started_at=datetime.fromtimestamp(record.started or 0, UTC),
                metadata={"session": "none"},
                status=TrajectoryStatus.failed if step.status == StepStatus.error else TrajectoryStatus.completed,
                ended_at=step.ended_at or datetime.fromtimestamp(record.started or 0, UTC),
            )
            assert start.header == header and start.header.model_fields_set == header.model_fields_set
            assert (start.event_id, start.trajectory_id, start.tenant_id) == (
                f"{record.trajectory_id}:start",
                record.trajectory_id,
                record.tenant_id,
            )
            checked += 1
    assert checked > 50


def test_a_session_start_holds_the_header_it_names() -> None:
    session = SessionRecord(
        id="s1", trajectory_id="traj_s1", tenant_id="acme", agent="support", task_id="t-9", task_input={"q": 1}, at=5.0
    )
    started = session.started()
    assert (started.event_id, started.trajectory_id, started.tenant_id) == ("traj_s1:start", "traj_s1", "acme")
    assert started.header == TrajectoryHeader(
        id="traj_s1",
        tenant_id="acme",
        agent="support",
        task_id="t-9",
        task_input={"q": 1},
        started_at=datetime.fromtimestamp(5.0, UTC),
    )
