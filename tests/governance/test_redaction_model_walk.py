"""Redaction reads llm_calls and trajectory headers from their models, dumping them only when something changes
(`events._walked`). It must store exactly what the walk over their dumps stores: the same events, the same
placeholders across a trajectory's events, the same token ids, the same finding counts. Each test redacts the
same events with both walks (`EventRedactor(walk_models=False)` dumps every event first) and compares."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from tests.governance.event_walk_side import corpus_texts, llm_call, trajectory_events
from tokenizers import Tokenizer

from evolvable.governance.redaction import EventRedactor, RedactionEngine, TokenizerRegistry, events
from evolvable.governance.redaction.engine import PlaceholderMap, redaction_counts
from evolvable.protocol import models as m
from evolvable.telemetry.metrics import REDACTIONS

BROAD = Path(__file__).resolve().parents[2] / "benchmarks" / "corpus" / "broad.py"
MODEL = "smollm2-135m"


@pytest.fixture(scope="module")
def engine() -> RedactionEngine:
    return RedactionEngine()


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return corpus_texts(str(BROAD))


def _counts() -> dict[str, float]:
    redaction_counts.flush()
    return {
        sample.labels["kind"]: sample.value
        for metric in REDACTIONS.collect()
        for sample in metric.samples
        if sample.name.endswith("_total")
    }


def _redacted(redactor: EventRedactor, batches: list[list[m.Event]]) -> tuple[list[Any], dict[str, float]]:
    """The redacted events of every batch, and the findings counted while redacting them."""
    before = _counts()
    out = [event for batch in batches for event in redactor.redact_events(batch)]
    after = _counts()
    return out, {kind: after[kind] - before.get(kind, 0.0) for kind in after if after[kind] != before.get(kind, 0.0)}


def _both_walks(
    engine: RedactionEngine, batches: list[list[m.Event]], tokenizers: TokenizerRegistry | None = None
) -> tuple[list[Any], list[Any]]:
    """The same batches through a redactor walking models and one walking dumps; asserts they agree."""
    walked, walked_counts = _redacted(EventRedactor(engine, tokenizers=tokenizers), batches)
    dumped, dumped_counts = _redacted(EventRedactor(engine, tokenizers=tokenizers, walk_models=False), batches)
    assert [e.model_dump() for e in walked] == [e.model_dump() for e in dumped]
    assert walked_counts == dumped_counts
    sources = [event for batch in batches for event in batch]
    # an event without findings is stored as it came by both (no copy validated again)
    assert [a is s for a, s in zip(walked, sources, strict=True)] == [
        b is s for b, s in zip(dumped, sources, strict=True)
    ]
    return walked, sources


def test_events_of_every_kind_from_the_corpora_store_the_same(engine: RedactionEngine, texts: list[str]) -> None:
    def t(i: int) -> str:
        return texts[i % len(texts)]

    batches = [trajectory_events(n, t) for n in range(60)]  # seven trajectories recur across the batches
    walked, sources = _both_walks(engine, batches)
    changed = [e for e, s in zip(walked, sources, strict=True) if e is not s]
    assert sum(isinstance(e, m.StepAppended) and e.step.kind == "llm_call" for e in changed) >= 50
    assert sum(isinstance(e, m.TrajectoryStarted) for e in changed) >= 50
    placeholders = str([e.model_dump() for e in changed])
    assert "<EMAIL_" in placeholders and "<PHONE_" in placeholders


def test_clean_calls_are_walked_without_a_dump_and_stored_as_they_came(engine: RedactionEngine) -> None:
    question, answer = "Where is order number 7? It was due on Monday.", "It left the warehouse today."
    call = _call_with(
        agent="support",
        request_messages=[
            m.ChatMessage(role="system", content="Be brief."),
            m.ChatMessage(role="user", content=question),
        ],
        choices=[m.CompletionChoice(message=m.ChatMessage(role="assistant", content=answer), finish_reason="stop")],
        sampling={"temperature": 0.2},
        metadata={"upstream": "mock"},
        response_id="chatcmpl-7",
    )
    header = m.TrajectoryHeader(id="traj_shapes", agent="support", task_input={"ask": question}, metadata={"k": "v"})
    start = m.TrajectoryStarted(trajectory_id="traj_shapes", header=header)
    walked, _ = _both_walks(engine, [[start, call]])
    for event, stored in zip((start, call), walked, strict=True):
        assert events._walked(event, events._EngineRedactor(engine, PlaceholderMap())) is None  # no dump made
        assert stored is event  # stored as it came, no copy validated


def _call_with(**fields: Any) -> m.StepAppended:
    step = m.LLMCallStep(**{"model": "gpt-test", **fields})
    return m.StepAppended(trajectory_id="traj_shapes", step=step)


SHAPES = {
    "extra message fields": dict(
        request_messages=[
            m.ChatMessage(role="user", content="mail me at ann.lee@example.com", audio={"id": "a 555-0100"}),
            m.ChatMessage(role="assistant", content="", refusal="call 415-555-0132", name="desk"),
        ]
    ),
    "multi-part content": dict(
        request_messages=[
            m.ChatMessage(
                role="user",
                content=[
                    {"type": "text", "text": "my card is 4111 1111 1111 1111"},
                    {"type": "image_url", "image_url": {"url": "https://example.com/a.png?u=bob@example.com"}},
                ],
            )
        ]
    ),
    "tool calls with secrets in their arguments": dict(
        request_messages=[
            m.ChatMessage(
                role="assistant",
                tool_calls=[
                    m.ToolCall(
                        id="call_415-555-0132",
                        function=m.FunctionCall(name="lookup", arguments='{"email": "x@example.com", "api_key": "k"}'),
                    ),
                    m.ToolCall(id="call_2", function=m.FunctionCall(name="noop", arguments="")),
                ],
            ),
            m.ChatMessage(role="tool", tool_call_id="call_415-555-0132", content='{"phone": "415-555-0132"}'),
        ]
    ),
    "a completions call": dict(
        endpoint="completions",
        prompt="Summarize: Bob (bob@example.com) called.",
        choices=[m.CompletionChoice(text="Bob, reachable at bob@example.com, called.")],
    ),
    "an error": dict(error=m.ErrorInfo(type="upstream 415-555-0132", message="denied for ann@example.com")),
    "identifiers only": dict(response_id="resp ann@example.com", agent="agent ann@example.com"),
    "secrets under sampling and tools": dict(
        sampling={"user": "ann@example.com", "password": "hunter22", "n": 2, "nested": [{"token": "abc"}]},
        tools=[{"type": "function", "function": {"name": "f", "description": "call 415-555-0132"}}],
        metadata={"note": "ssn 123-45-6789", "big": 12345678901234},
    ),
    "an email in every field, numbered in the order visited": dict(
        metadata={"a": "m1@example.com"},
        agent="a2@example.com",
        request_messages=[
            m.ChatMessage(
                role="assistant",
                content="c3@example.com",
                name="n4@example.com",
                tool_calls=[
                    m.ToolCall(
                        id="i5@example.com",
                        function=m.FunctionCall(name="f6@example.com", arguments='{"to": "g7@example.com"}'),
                    )
                ],
                x_note="x8@example.com",
            ),
            m.ChatMessage(role="tool", tool_call_id="t9@example.com", content=[{"text": "p10@example.com"}]),
        ],
        tools=[{"description": "d11@example.com"}],
        sampling={"user": "s12@example.com"},
        choices=[
            m.CompletionChoice(message=m.ChatMessage(role="assistant", content="r13@example.com")),
            m.CompletionChoice(text="r14@example.com"),
        ],
        error=m.ErrorInfo(type="e15@example.com", message="e16@example.com"),
        response_id="r17@example.com",
        model="o18@example.com",
    ),
    "nothing to redact": dict(
        request_messages=[m.ChatMessage(role="user", content="hello")],
        choices=[m.CompletionChoice(message=m.ChatMessage(role="assistant", content="hi"))],
        sampling={"temperature": 0.1},
    ),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_each_shape_of_llm_call_stores_the_same(engine: RedactionEngine, shape: str) -> None:
    event = _call_with(**SHAPES[shape])
    redactor = events._EngineRedactor(engine, PlaceholderMap())
    assert events._walked(event, redactor) is not events._NOT_WALKED  # the model walk takes every shape here
    _both_walks(engine, [[event, _call_with(**SHAPES[shape])]])


class _Foreign(BaseModel):
    email: str


@pytest.mark.parametrize(
    "event",
    [
        _call_with(metadata={"who": _Foreign(email="ann@example.com")}),
        _call_with(metadata={"pair": ("ann@example.com", 1)}),
        _call_with(sampling={"user": {"ids": {1, 2}}}),
        _call_with(request_messages=[m.ChatMessage(role="user", content="x", extra=_Foreign(email="a@example.com"))]),
        m.TrajectoryStarted(
            trajectory_id="traj_f",
            header=m.TrajectoryHeader(id="traj_f", task_input=_Foreign(email="ann@example.com")),
        ),
    ],
    ids=["model in metadata", "tuple in metadata", "set in sampling", "model in a message", "model as task input"],
)
def test_values_a_dump_would_change_are_left_to_the_dict_walk(engine: RedactionEngine, event: m.Event) -> None:
    redactor = events._EngineRedactor(engine, PlaceholderMap())
    assert events._walked(event, redactor) is events._NOT_WALKED
    walked, _ = _both_walks(engine, [[event]])
    assert "ann@example.com" not in str(walked[0].model_dump())


def test_token_ids_of_redacted_calls_come_out_the_same(engine: RedactionEngine, smollm2_tokenizer_json: Path) -> None:
    tokenizer = Tokenizer.from_file(str(smollm2_tokenizer_json))
    registry = TokenizerRegistry({MODEL: smollm2_tokenizer_json})

    def call(question: str, answer: str) -> m.StepAppended:
        messages = [m.ChatMessage(role="system", content="Be brief."), m.ChatMessage(role="user", content=question)]
        prompt = "".join(f"<|im_start|>{x.role}\n{x.content}<|im_end|>\n" for x in messages) + "<|im_start|>assistant\n"
        completion = tokenizer.encode(answer, add_special_tokens=False).ids
        step = m.LLMCallStep(
            model=MODEL,
            request_messages=messages,
            choices=[
                m.CompletionChoice(
                    message=m.ChatMessage(role="assistant", content=answer),
                    completion_token_ids=completion,
                    logprobs=[-0.5] * len(completion),
                )
            ],
            prompt_token_ids=tokenizer.encode(prompt, add_special_tokens=False).ids,
            metadata={"note": "ticket 7"},
        )
        return m.StepAppended(trajectory_id="traj_tokens", step=step)

    batches = [
        [call("Mail bob.smith@example.com about it", "I will mail bob.smith@example.com today.")],
        [call("And call 415-555-0132 too", "Calling 415-555-0132 now.")],
        [call("Thanks!", "You are welcome.")],
    ]
    walked, _ = _both_walks(engine, batches, registry)
    first = walked[0].step
    assert first.metadata.get("token_ids_redacted") and first.prompt_token_ids is not None
    assert "bob.smith" not in tokenizer.decode(first.choices[0].completion_token_ids)


def test_the_corpus_llm_call_holds_every_kind_of_field_the_walk_visits() -> None:
    """The llm_call the side script builds still has every field the model walk visits (a guard against the
    corpus test silently covering less)."""
    step = llm_call(1, lambda i: f"text {i}")
    assert step.tools and step.sampling and step.metadata and step.response_id and step.agent
    kinds = {type(c) for msg in step.request_messages for c in ([msg.content] if msg.content else [])}
    assert {str, list} <= kinds
    assert any(msg.tool_calls for msg in step.request_messages)
    assert step.choices[0].message is not None and step.choices[0].message.__pydantic_extra__
