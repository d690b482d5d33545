"""EventRedactor: what gets redacted in ATDP events, token-id hygiene, consistency across batches, fail-closed."""

from __future__ import annotations

import json
from collections.abc import Iterable

from evolvable.governance.redaction import FAILED_MARKER, EventRedactor, Finding, RedactionEngine, default_recognizers
from evolvable.protocol.models import (
    ChatMessage,
    CompletionChoice,
    FunctionCall,
    LLMCallStep,
    MessageStep,
    Signal,
    SignalAttached,
    SignalKind,
    StepAppended,
    ToolCall,
    ToolCallStep,
    Trajectory,
    TrajectoryEnded,
    TrajectoryHeader,
    TrajectoryStarted,
    TrajectoryStatus,
    events_for,
)
from evolvable.store import Store

EMAIL, CARD, KEY = (
    "bob.smith@example.com",
    "4111 1111 1111 1111",
    "sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z_Ab3dEf6hIj9",
)


def _llm_step(user_text: str, *, with_ids: bool = True) -> LLMCallStep:
    call = ToolCall(id="call_1", function=FunctionCall(name="lookup", arguments=json.dumps({"email": EMAIL, "n": 3})))
    return LLMCallStep(
        model="smollm2-135m",
        request_messages=[
            ChatMessage(role="system", content="You are a support agent."),
            ChatMessage(role="user", content=[{"type": "text", "text": user_text}]),
        ],
        choices=[
            CompletionChoice(
                message=ChatMessage(role="assistant", content="Looking up.", tool_calls=[call]),
                completion_token_ids=[1, 2, 3] if with_ids else None,
                logprobs=[-0.1, -0.2, -0.3] if with_ids else None,
            )
        ],
        prompt_token_ids=[5, 6, 7] if with_ids else None,
        policy_version="p1",
    )


def test_step_contents_are_redacted_and_structure_is_kept() -> None:
    tid = "traj_a"
    step = _llm_step(f"my card is {CARD}, mail {EMAIL}")
    tool = ToolCallStep(
        tool_name="charge",
        tool_call_id="call_1",
        arguments={"card": CARD, "amount": "$12.00"},
        result=json.dumps({"ok": True, "receipt_to": EMAIL}),
        error_message=f"retry with key {KEY}",
        metadata={"note": f"from {EMAIL}", "count": 3},
    )
    events = [
        TrajectoryStarted(
            trajectory_id=tid, header=TrajectoryHeader(id=tid, end_user="user-42", task_input={"q": EMAIL})
        ),
        StepAppended(trajectory_id=tid, step=step),
        StepAppended(trajectory_id=tid, step=tool),
        SignalAttached(
            trajectory_id=tid, signal=Signal(kind=SignalKind.user_feedback, value=1.0, label=f"thanks {EMAIL}")
        ),
        TrajectoryEnded(trajectory_id=tid, status=TrajectoryStatus.completed, metadata={"by": EMAIL}),
    ]
    out = EventRedactor(RedactionEngine()).redact_events(events)
    dumped = json.dumps([e.model_dump(mode="json") for e in out])
    assert EMAIL not in dumped and CARD not in dumped and KEY not in dumped
    start, llm, tool_out, signal, end = out
    assert start.header.task_input == {"q": "<EMAIL_1>"} and start.header.end_user == "user-42"
    user = llm.step.request_messages[1].content
    assert user == [{"type": "text", "text": "my card is <CREDIT_CARD_1>, mail <EMAIL_1>"}]
    arguments = json.loads(llm.step.choices[0].message.tool_calls[0].function.arguments)
    assert arguments == {"email": "<EMAIL_1>", "n": 3}
    assert llm.step.prompt_token_ids is None and llm.step.choices[0].completion_token_ids is None
    assert llm.step.choices[0].logprobs is None and llm.step.metadata["token_ids_dropped"] == "redaction"
    assert llm.step.id == step.id and llm.step.model == "smollm2-135m" and llm.event_id == events[1].event_id
    assert tool_out.step.arguments == {"card": "<CREDIT_CARD_1>", "amount": "$12.00"}
    assert json.loads(tool_out.step.result) == {"ok": True, "receipt_to": "<EMAIL_1>"}
    assert tool_out.step.error_message == "retry with key <OPENAI_KEY_1>" and tool_out.step.metadata["count"] == 3
    assert signal.signal.label == "thanks <EMAIL_1>" and end.metadata == {"by": "<EMAIL_1>"}


def test_token_ids_are_kept_when_nothing_was_redacted() -> None:
    step = _llm_step("where is order ORD-2026-1?")
    step.choices[0].message.tool_calls[0].function.arguments = json.dumps({"order": "ORD-2026-1"})
    (out,) = EventRedactor(RedactionEngine()).redact_events([StepAppended(trajectory_id="t", step=step)])
    assert out.step.prompt_token_ids == [5, 6, 7] and out.step.choices[0].logprobs == [-0.1, -0.2, -0.3]
    assert "token_ids_dropped" not in out.step.metadata


def test_placeholders_stay_consistent_across_batches_and_separate_across_trajectories() -> None:
    redactor = EventRedactor(RedactionEngine(), max_trajectories=2)

    def message(tid: str, text: str) -> StepAppended:
        return StepAppended(trajectory_id=tid, step=MessageStep(content=text))

    (a1,) = redactor.redact_events([message("t1", f"a {EMAIL} b amy@example.com")])
    (b1,) = redactor.redact_events([message("t2", "only amy@example.com")])
    (a2,) = redactor.redact_events([message("t1", f"again amy@example.com then {EMAIL}")])
    assert a1.step.content == "a <EMAIL_1> b <EMAIL_2>" and a2.step.content == "again <EMAIL_2> then <EMAIL_1>"
    assert b1.step.content == "only <EMAIL_1>"
    redactor.redact_events([message("t3", "x"), message("t4", "y")])  # evicts t1 and t2 from the bounded LRU
    (a3,) = redactor.redact_events([message("t1", "amy@example.com")])
    assert a3.step.content == "<EMAIL_1>"


class Exploding:
    kind = "EXPLODING"

    def find(self, text: str, lowered: str) -> Iterable[Finding]:
        if "boom" in text:
            raise RuntimeError("recognizer crashed")
        return ()


def test_a_failing_recognizer_leaves_markers_and_calls_the_hook() -> None:
    failures: list[str] = []
    engine = RedactionEngine([*default_recognizers(), Exploding()], on_failure=lambda kind, err: failures.append(kind))
    tool = ToolCallStep(tool_name="search", arguments={"q": f"boom {EMAIL}"}, result="fine text")
    (out,) = EventRedactor(engine).redact_events([StepAppended(trajectory_id="t", step=tool)])
    assert out.step.arguments == {"q": FAILED_MARKER} and out.step.result == "fine text"
    assert failures == ["EXPLODING"]


def test_an_unexpected_error_scrubs_the_whole_event() -> None:
    class BrokenEngine(RedactionEngine):
        def redact_value(self, value, placeholders=None, key=None):  # type: ignore[no-untyped-def]
            raise RuntimeError("walker bug")

    failures: list[str] = []
    engine = BrokenEngine(on_failure=lambda kind, err: failures.append(kind))
    step = ToolCallStep(tool_name="search", arguments={"q": EMAIL}, result=[EMAIL, 3], metadata={"m": EMAIL})
    (out,) = EventRedactor(engine).redact_events([StepAppended(trajectory_id="t", step=step)])
    assert EMAIL not in out.model_dump_json()
    assert out.step.tool_name == "search" and out.step.result == [FAILED_MARKER, 3]
    assert failures == ["event"]


def test_redacted_events_round_trip_through_the_real_store(db_url: str) -> None:
    trajectory = Trajectory(
        agent="support",
        status=TrajectoryStatus.completed,
        steps=[_llm_step(f"card {CARD}"), ToolCallStep(tool_name="t", arguments=json.dumps({"key": KEY}))],
    )
    store = Store.open(db_url)
    try:
        store.apply_events(EventRedactor(RedactionEngine()).redact_events(events_for(trajectory)))
        stored = store.get_trajectory(trajectory.id)
    finally:
        store.close()
    text = stored.model_dump_json()
    assert CARD not in text and KEY not in text and "<CREDIT_CARD_1>" in text
    assert json.loads(stored.steps[1].arguments) == {"key": "<OPENAI_KEY_1>"}


def test_redact_trajectory_uses_one_map() -> None:
    trajectory = Trajectory(steps=[MessageStep(content=EMAIL), MessageStep(content=f"re: {EMAIL}")])
    out = EventRedactor(RedactionEngine()).redact_trajectory(trajectory)
    assert [s.content for s in out.steps] == ["<EMAIL_1>", "re: <EMAIL_1>"]


def test_an_event_with_nothing_to_redact_is_stored_as_it_came_without_a_second_validation() -> None:
    """The writer's fast path: no finding anywhere means the very event object goes on (no dump-validate copy)."""
    clean = StepAppended(trajectory_id="traj_c", step=_llm_step("where is my parcel?", with_ids=False))
    call = clean.step.choices[0].message.tool_calls[0]  # type: ignore[union-attr, index]
    call.function.arguments = json.dumps({"order": "A-17", "n": 3})
    started = TrajectoryStarted(
        trajectory_id="traj_c", header=TrajectoryHeader(id="traj_c", agent="desk", task_input={"q": "parcel"})
    )
    ended = TrajectoryEnded(trajectory_id="traj_c", status=TrajectoryStatus.completed, metadata={"note": "fine"})
    out = EventRedactor(RedactionEngine()).redact_events([started, clean, ended])
    assert [a is b for a, b in zip(out, [started, clean, ended], strict=True)] == [True, True, True]

    dirty = StepAppended(trajectory_id="traj_c", step=_llm_step(f"mail {EMAIL}", with_ids=False))
    (redacted,) = EventRedactor(RedactionEngine()).redact_events([dirty])
    assert redacted is not dirty and EMAIL not in redacted.model_dump_json()
    assert EMAIL in dirty.model_dump_json()  # the caller's event is never changed in place


def test_a_finding_seen_only_by_the_llm_call_redactor_still_makes_a_redacted_copy() -> None:
    """With tokenizers, an llm_call is redacted by a child redactor: what it replaces must count for the event."""
    from evolvable.governance.redaction import TokenizerRegistry

    registry = TokenizerRegistry({"some-other-model": "/nonexistent/tokenizer.json"})
    assert registry  # a registry with an entry: for_llm_call hands out the recording child redactor
    step = _llm_step(f"card {CARD}", with_ids=False)
    step.choices[0].message.tool_calls[0].function.arguments = "{}"  # type: ignore[union-attr, index]
    event = StepAppended(trajectory_id="traj_d", step=step)
    (redacted,) = EventRedactor(RedactionEngine(), tokenizers=registry).redact_events([event])
    assert redacted is not event
    assert CARD not in redacted.model_dump_json() and "<CREDIT_CARD_1>" in redacted.model_dump_json()


def test_a_finding_only_in_an_identifier_keeps_every_token_id() -> None:
    """The dump leaves token ids out; when only an identifier changes (no text did), the copy gets them all back."""
    step = _llm_step("where is order ORD-2026-1?")
    step.choices[0].message.tool_calls[0].function.arguments = "{}"  # type: ignore[union-attr, index]
    step.model = f"model-of-{EMAIL}"
    (out,) = EventRedactor(RedactionEngine()).redact_events([StepAppended(trajectory_id="t_ids", step=step)])
    assert EMAIL not in out.model_dump_json() and out.step.model != step.model
    assert out.step.prompt_token_ids == [5, 6, 7]
    assert out.step.choices[0].completion_token_ids == [1, 2, 3] and out.step.choices[0].logprobs == [-0.1, -0.2, -0.3]
    assert "token_ids_dropped" not in out.step.metadata


def test_changed_text_without_a_tokenizer_drops_the_ids_and_leaves_the_callers_event_whole() -> None:
    step = _llm_step(f"mail {EMAIL}")
    event = StepAppended(trajectory_id="t_drop", step=step)
    (out,) = EventRedactor(RedactionEngine()).redact_events([event])
    assert out.step.prompt_token_ids is None and out.step.choices[0].completion_token_ids is None
    assert out.step.choices[0].logprobs is None and out.step.metadata["token_ids_dropped"] == "redaction"
    assert step.prompt_token_ids == [5, 6, 7] and step.choices[0].completion_token_ids == [1, 2, 3]
    assert step.choices[0].logprobs == [-0.1, -0.2, -0.3] and "token_ids_dropped" not in step.metadata


def test_an_end_without_metadata_passes_as_it_came_and_one_with_metadata_is_redacted() -> None:
    redactor = EventRedactor(RedactionEngine())
    bare = TrajectoryEnded(trajectory_id="t_end", status=TrajectoryStatus.failed)
    noted = TrajectoryEnded(trajectory_id="t_end", status=TrajectoryStatus.failed, metadata={"by": EMAIL})
    out_bare, out_noted = redactor.redact_events([bare, noted])
    assert out_bare is bare
    assert out_noted.metadata == {"by": "<EMAIL_1>"} and out_noted.status == TrajectoryStatus.failed
