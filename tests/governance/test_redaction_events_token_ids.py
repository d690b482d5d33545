"""Redacted llm_calls keep redacted token ids when the model's tokenizer is known (the real SmolLM2 one here):
prompt and completion ids decode to the stored redacted text, placeholders match the messages across steps and
batches, replaced completion tokens get loss mask 0, and anything inconsistent falls back to dropping the ids."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path

import pytest
from tests.support.numbers import names_number
from tokenizers import Tokenizer

from evolvable.governance import Governance
from evolvable.governance.pipeline import Governor
from evolvable.governance.redaction import (
    EventRedactor,
    Finding,
    RedactionEngine,
    RegexRecognizer,
    TokenizerRegistry,
)
from evolvable.governance.tenants import TenantDirectory
from evolvable.protocol.converters.rl_samples import trajectory_to_samples
from evolvable.protocol.models import (
    ChatMessage,
    CompletionChoice,
    FunctionCall,
    LLMCallStep,
    StepAppended,
    ToolCall,
    Trajectory,
    TrajectoryStatus,
    events_for,
)
from evolvable.store import Store

MODEL = "smollm2-135m"
BOB, AMY, PHONE = "bob.smith@example.com", "amy.lee@example.org", "415-555-0132"
SYSTEM = "You are the support desk of Acme. Be brief."


@pytest.fixture(scope="module")
def tokenizer(smollm2_tokenizer_json: Path) -> Tokenizer:
    return Tokenizer.from_file(str(smollm2_tokenizer_json))


@pytest.fixture(scope="module")
def registry(smollm2_tokenizer_json: Path) -> TokenizerRegistry:
    return TokenizerRegistry({MODEL: smollm2_tokenizer_json})


def _chat_prompt(messages: list[ChatMessage]) -> str:
    """SmolLM2's chat template, as the policy server applies it (add_generation_prompt=True)."""
    rendered = "".join(f"<|im_start|>{m.role}\n{m.content}<|im_end|>\n" for m in messages)
    return rendered + "<|im_start|>assistant\n"


def _call(tokenizer: Tokenizer, messages: list[ChatMessage], answer: str, *, model: str = MODEL) -> LLMCallStep:
    completion = [*tokenizer.encode(answer, add_special_tokens=False).ids, tokenizer.token_to_id("<|im_end|>")]
    return LLMCallStep(
        model=model,
        request_messages=messages,
        choices=[
            CompletionChoice(
                message=ChatMessage(role="assistant", content=answer),
                finish_reason="stop",
                completion_token_ids=completion,
                logprobs=[-0.25 - 0.01 * i for i in range(len(completion))],
            )
        ],
        prompt_token_ids=tokenizer.encode(_chat_prompt(messages), add_special_tokens=False).ids,
        policy_version="p1",
    )


def _two_turns(tokenizer: Tokenizer) -> tuple[LLMCallStep, LLMCallStep]:
    first_messages = [
        ChatMessage(role="system", content=SYSTEM),
        ChatMessage(role="user", content=f"Hi, I'm Bob ({BOB}, {PHONE}). My parcel never came 😕 — help?"),
    ]
    first = _call(tokenizer, first_messages, f"Sorry, Bob! I will email {BOB} with a tracking link.")
    second_messages = [
        *first_messages,
        ChatMessage(role="assistant", content=first.choices[0].message.content),
        ChatMessage(role="user", content=f"Please send it to my wife {AMY} instead, or to {BOB}."),
    ]
    second = _call(tokenizer, second_messages, f"Done: {AMY} gets the link; {BOB} a copy.")
    return first, second


def _decoded(tokenizer: Tokenizer, step: LLMCallStep) -> list[str]:
    texts = [tokenizer.decode(step.prompt_token_ids or [], skip_special_tokens=False)]
    texts += [tokenizer.decode(c.completion_token_ids or [], skip_special_tokens=False) for c in step.choices]
    return texts


def test_redacted_calls_keep_ids_that_decode_to_the_redacted_text(
    tokenizer: Tokenizer, registry: TokenizerRegistry
) -> None:
    first, _ = _two_turns(tokenizer)
    redactor = EventRedactor(RedactionEngine(), tokenizers=registry)
    (out,) = redactor.redact_events([StepAppended(trajectory_id="t1", step=first)])
    step = out.step
    user = step.request_messages[1].content
    assert user == "Hi, I'm Bob (<EMAIL_1>, <PHONE_1>). My parcel never came 😕 — help?"
    answer = step.choices[0].message.content
    assert answer == "Sorry, Bob! I will email <EMAIL_1> with a tracking link."
    assert step.has_token_ids and "token_ids_dropped" not in step.metadata
    assert step.metadata["token_ids_redacted"] == 3  # two in the prompt, one in the completion
    prompt_text = tokenizer.decode(step.prompt_token_ids, skip_special_tokens=False)
    assert prompt_text == _chat_prompt(step.request_messages)  # exactly the template over the stored messages
    choice = step.choices[0]
    assert tokenizer.decode(choice.completion_token_ids, skip_special_tokens=True) == answer
    for text in _decoded(tokenizer, step):
        assert BOB not in text and PHONE not in text and "bob.smith" not in text
    # The replaced completion tokens are marked, their logprobs zeroed; the rest keep the engine's values.
    ((start, end),) = choice.redacted_token_spans
    assert tokenizer.decode(choice.completion_token_ids[start:end]) == " <EMAIL_1>"
    assert choice.logprobs[start:end] == [0.0] * (end - start)
    original = first.choices[0]
    assert choice.completion_token_ids[:start] == original.completion_token_ids[:start]
    assert choice.logprobs[:start] == original.logprobs[:start]
    tail = len(choice.completion_token_ids) - end
    assert choice.completion_token_ids[end:] == original.completion_token_ids[-tail:]
    assert choice.logprobs[end:] == original.logprobs[-tail:]


def test_placeholders_match_across_batches_and_turns_extend_one_rl_sequence(
    tokenizer: Tokenizer, registry: TokenizerRegistry
) -> None:
    first, second = _two_turns(tokenizer)
    redactor = EventRedactor(RedactionEngine(), tokenizers=registry)
    (a,) = redactor.redact_events([StepAppended(trajectory_id="t2", step=first)])
    (b,) = redactor.redact_events([StepAppended(trajectory_id="t2", step=second)])  # a later writer batch
    assert b.step.request_messages[3].content == "Please send it to my wife <EMAIL_2> instead, or to <EMAIL_1>."
    assert b.step.choices[0].message.content == "Done: <EMAIL_2> gets the link; <EMAIL_1> a copy."
    assert tokenizer.decode(b.step.prompt_token_ids, skip_special_tokens=False) == _chat_prompt(b.step.request_messages)
    for step in (a.step, b.step):
        for text in _decoded(tokenizer, step):
            assert BOB not in text and AMY not in text and PHONE not in text
    # Turn 2's prompt extends turn 1's prompt + completion token for token: one training sequence.
    turn_one = [*a.step.prompt_token_ids, *a.step.choices[0].completion_token_ids]
    assert b.step.prompt_token_ids[: len(turn_one)] == turn_one
    trajectory = Trajectory(id="t2", status=TrajectoryStatus.completed, steps=[a.step, b.step])
    (sample,) = trajectory_to_samples(trajectory)
    assert sample.step_ids == [a.step.id, b.step.id]
    masked = _replaced_positions(sample.input_ids, [a.step, b.step], len(a.step.prompt_token_ids))
    generated = [i for i, m in enumerate(sample.loss_mask) if m]
    assert masked and not set(masked) & set(generated)
    assert all(sample.behaviour_logprobs[i] == 0.0 for i in masked)
    assert all(sample.behaviour_logprobs[i] != 0.0 for i in generated)
    # every completion token that is not a placeholder is trained on
    completion_tokens = sum(len(s.choices[0].completion_token_ids) for s in (a.step, b.step))
    assert len(generated) + len(masked) == completion_tokens


def _replaced_positions(input_ids: list[int], steps: list[LLMCallStep], first_prompt_len: int) -> list[int]:
    """Positions in the merged sequence of the completion tokens governance replaced."""
    positions: list[int] = []
    offset = first_prompt_len
    for k, step in enumerate(steps):
        if k:
            offset = len(step.prompt_token_ids)
        choice = step.choices[0]
        positions += [offset + i for s, e in choice.redacted_token_spans or [] for i in range(s, e)]
    return positions


def test_re_redacting_a_stored_trajectory_keeps_its_redacted_ids(
    tokenizer: Tokenizer, registry: TokenizerRegistry
) -> None:
    first, second = _two_turns(tokenizer)
    redactor = EventRedactor(RedactionEngine(), tokenizers=registry)
    stored = redactor.redact_trajectory(Trajectory(status=TrajectoryStatus.completed, steps=[first, second]))
    again = redactor.redact_trajectory(stored)
    assert again == stored and all(call.has_token_ids for call in again.llm_calls())
    assert all(call.choices[0].redacted_token_spans for call in again.llm_calls())
    # a stricter engine finds more (the name) in the prompt: the old completion spans stay, nothing leaks
    names = RedactionEngine([*RedactionEngine().recognizers, RegexRecognizer("NAME", re.compile(r"\bBob\b"))])
    stricter = EventRedactor(names, tokenizers=registry).redact_trajectory(stored)
    for call in stricter.llm_calls():
        assert "Bob" not in call.request_messages[1].text()
        if call.has_token_ids:  # turn 2: only its prompt named Bob; its answer keeps the first pass's spans
            assert not any("Bob" in text for text in _decoded(tokenizer, call))
            assert call.choices[0].redacted_token_spans == stored.llm_calls()[1].choices[0].redacted_token_spans
            assert call.metadata["token_ids_redacted"] == stored.llm_calls()[1].metadata["token_ids_redacted"] + 2
        else:  # turn 1: its answer names Bob, and shifting the first pass's spans is not attempted
            assert call.metadata["token_ids_dropped"] == "redaction_mismatch"
            assert "token_ids_redacted" not in call.metadata
    assert sum(call.has_token_ids for call in stricter.llm_calls()) == 1


def test_an_answer_cut_inside_an_emoji_keeps_its_ids(tokenizer: Tokenizer, registry: TokenizerRegistry) -> None:
    """finish_reason length in the middle of a character: the stored answer ends in U+FFFD, so do the ids."""
    first, _ = _two_turns(tokenizer)
    ids = [*tokenizer.encode(f"Mail sent to {BOB} ", add_special_tokens=False).ids, *tokenizer.encode("😀").ids[:1]]
    answer = ChatMessage(role="assistant", content=tokenizer.decode(ids))
    assert answer.content.endswith("\ufffd")
    first.choices = [
        CompletionChoice(message=answer, finish_reason="length", completion_token_ids=ids, logprobs=[-0.5] * len(ids))
    ]
    (out,) = EventRedactor(RedactionEngine(), tokenizers=registry).redact_events(
        [StepAppended(trajectory_id="t7", step=first)]
    )
    kept = out.step.choices[0]
    assert out.step.has_token_ids and kept.message.content == "Mail sent to <EMAIL_1> \ufffd"
    assert tokenizer.decode(kept.completion_token_ids) == kept.message.content


def test_an_answer_that_is_not_its_tokens_text_drops_the_ids(tokenizer: Tokenizer, registry: TokenizerRegistry) -> None:
    """Tool calls parsed out of the tokens: the message cannot be checked against them, so the ids go."""
    first, _ = _two_turns(tokenizer)
    call = ToolCall(id="c1", function=FunctionCall(name="email", arguments=json.dumps({"to": BOB})))
    first.choices[0].message = ChatMessage(role="assistant", content=None, tool_calls=[call])
    (out,) = EventRedactor(RedactionEngine(), tokenizers=registry).redact_events(
        [StepAppended(trajectory_id="t3", step=first)]
    )
    assert out.step.metadata["token_ids_dropped"] == "redaction_mismatch"
    assert out.step.prompt_token_ids is None and out.step.choices[0].completion_token_ids is None
    assert out.step.choices[0].logprobs is None and out.step.choices[0].redacted_token_spans is None


def test_without_a_tokenizer_for_the_model_ids_are_dropped_as_before(
    tokenizer: Tokenizer, registry: TokenizerRegistry, smollm2_tokenizer_json: Path
) -> None:
    first, _ = _two_turns(tokenizer)
    for redactor in (EventRedactor(RedactionEngine()), EventRedactor(RedactionEngine(), tokenizers=registry)):
        step = first.model_copy(update={"model": "gpt-4o"}) if redactor.tokenizers else first
        (out,) = redactor.redact_events([StepAppended(trajectory_id="t4", step=step)])
        assert out.step.metadata["token_ids_dropped"] == "redaction" and out.step.prompt_token_ids is None
    # an adapter name served on the registered base model uses the fallback
    with_fallback = TokenizerRegistry({MODEL: smollm2_tokenizer_json}, fallback=MODEL)
    adapter = first.model_copy(update={"model": "support-rl-3"})
    (out,) = EventRedactor(RedactionEngine(), tokenizers=with_fallback).redact_events(
        [StepAppended(trajectory_id="t5", step=adapter)]
    )
    assert out.step.has_token_ids and out.step.metadata["token_ids_redacted"] == 3


class PinAfterLabel:
    """A context-sensitive recognizer (like NER): a PIN only right after 'PIN:' at the start of a text."""

    kind = "PIN"

    def find(self, text: str, lowered: str) -> Iterable[Finding]:
        match = re.match(r"PIN: (\d{4})", text)
        return [Finding(match.start(1), match.end(1), "PIN", 90)] if match else []


def test_a_value_redacted_in_a_message_but_not_found_in_the_tokens_drops_the_ids(
    tokenizer: Tokenizer, registry: TokenizerRegistry
) -> None:
    messages = [ChatMessage(role="user", content="PIN: 4821 please reset it")]
    step = _call(tokenizer, messages, "Okay, resetting it.")
    engine = RedactionEngine([PinAfterLabel()])
    (out,) = EventRedactor(engine, tokenizers=registry).redact_events([StepAppended(trajectory_id="t6", step=step)])
    assert out.step.request_messages[0].content == "PIN: <PIN_1> please reset it"
    # In the decoded prompt the PIN does not start the text, so the recognizer misses it: the ids must go.
    assert out.step.metadata["token_ids_dropped"] == "redaction_mismatch"
    assert out.step.prompt_token_ids is None and not names_number("4821", out.model_dump_json())


def test_the_governor_stores_redacted_ids_that_train(
    store: Store, tokenizer: Tokenizer, registry: TokenizerRegistry
) -> None:
    first, second = _two_turns(tokenizer)
    trajectory = Trajectory(tenant_id="acme", agent="support", status=TrajectoryStatus.completed, steps=[first, second])
    directory = TenantDirectory(store.engine, cache_ttl_s=0)
    directory.create_tenant("acme")
    governor = Governor(store, directory=directory, tokenizers=registry)
    store.apply_events(governor.govern(events_for(trajectory)))
    stored = store.get_trajectory(trajectory.id)
    assert BOB not in stored.model_dump_json() and AMY not in stored.model_dump_json()
    assert all(call.has_token_ids for call in stored.llm_calls())
    for call in stored.llm_calls():
        assert not any(BOB in t or AMY in t or PHONE in t for t in _decoded(tokenizer, call))
    samples = trajectory_to_samples(stored)
    assert len(samples) == 1 and 0 < samples[0].num_generated < sum(
        len(c.choices[0].completion_token_ids) for c in stored.llm_calls()
    )


def test_for_store_reads_the_tokenizer_setting(
    store: Store, smollm2_tokenizer_json: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVOLVABLE_TOKENIZERS", f"{MODEL}={smollm2_tokenizer_json}")
    configured = Governance.for_store(store, admin_key="").governor.tokenizers
    assert configured is not None and MODEL in configured and configured.codec_for(MODEL) is not None
    given = TokenizerRegistry({})
    assert Governance.for_store(store, admin_key="", tokenizers=given).governor.tokenizers is given
