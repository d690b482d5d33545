"""Exemplar placeholders rendered as the live conversation's own values (`render_messages(live_values=...)`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from evolvable.protocol.harness import Harness, MemoryExemplar, fill_placeholders, render_messages
from evolvable.protocol.models import ChatMessage, FunctionCall, ToolCall


def harness_with(*turns: tuple[str, str]) -> Harness:
    messages = [ChatMessage(role=role, content=text) for role, text in turns]  # type: ignore[arg-type]
    exemplar = MemoryExemplar(id="ex", cluster="c", task_input=messages[0].text(), messages=messages)
    return Harness(agent="a", system_prompt="Act.", memory=[exemplar], memory_k=1)


RESET = harness_with(
    ("user", "Ticket from <PERSON_1> <<EMAIL_1>>: reset my password"),
    ("assistant", '{"tool": "reset_password", "args": {"email": "<EMAIL_1>"}}'),
    ("user", 'Result: {"email": "<EMAIL_1>", "reset_link_sent": true}'),
    ("assistant", '{"tool": "reply_to_customer", "args": {"message": "Sent."}}'),
)
LIVE = [ChatMessage(role="user", content="Ticket from Ann Lee <ann@example.com>: reset my password")]


class Recorder:
    """A `LiveValues` that answers fixed values and remembers what it was asked."""

    def __init__(self, values: Mapping[str, str]) -> None:
        self.values = values
        self.calls: list[list[ChatMessage]] = []

    def __call__(self, conversation: Sequence[ChatMessage]) -> Mapping[str, str]:
        self.calls.append(list(conversation))
        return self.values


def test_each_placeholder_of_an_action_is_shown_as_the_live_value_of_the_same_number() -> None:
    values = Recorder({"<EMAIL_1>": "ann@example.com", "<PERSON_1>": "Ann Lee"})
    rendered = render_messages(RESET, LIVE, cluster="c", live_values=values)
    assert [m.text() for m in rendered[1:3]] == [
        "Ticket from <PERSON_1> <<EMAIL_1>>: reset my password",  # the exemplar's situation stays its own
        '{"tool": "reset_password", "args": {"email": "ann@example.com"}}',  # the action to copy is the live one
    ]
    assert rendered[-1] == LIVE[0]
    assert values.calls == [LIVE]  # asked with the live conversation only, never the exemplar
    assert RESET.memory[0].messages[1].text().endswith('"<EMAIL_1>"}}')  # the stored exemplar is untouched


def test_a_placeholder_without_a_live_value_stays_as_it_is() -> None:
    rendered = render_messages(RESET, LIVE, cluster="c", live_values=Recorder({"<EMAIL_2>": "other@example.com"}))
    assert rendered[2].text() == '{"tool": "reset_password", "args": {"email": "<EMAIL_1>"}}'
    assert "other@example.com" not in "".join(m.text() for m in rendered)
    assert render_messages(RESET, LIVE, cluster="c") == render_messages(RESET, LIVE, cluster="c", live_values=None)


def test_several_values_of_a_kind_go_by_number() -> None:
    text = "move <EMAIL_2> to <EMAIL_1>, not <EMAIL_12>; <REDACTION_FAILED> and <b>bold</b> are no placeholders"
    values = {"<EMAIL_1>": "a@x.com", "<EMAIL_2>": "b@x.com", "<CREDIT_CARD_1>": "4111"}
    assert fill_placeholders(text, values) == (
        "move b@x.com to a@x.com, not <EMAIL_12>; <REDACTION_FAILED> and <b>bold</b> are no placeholders"
    )
    assert fill_placeholders("card <CREDIT_CARD_1>", values) == "card 4111"


def test_live_values_are_computed_only_when_an_exemplar_holds_a_placeholder() -> None:
    plain = harness_with(("user", "<PERSON_1>: where is order 12"), ("assistant", '{"tool": "lookup_order"}'))
    values = Recorder({"<EMAIL_1>": "ann@example.com"})
    assert render_messages(plain, LIVE, cluster="c", live_values=values)[1].text() == "<PERSON_1>: where is order 12"
    render_messages(RESET.model_copy(update={"memory_k": 0}), LIVE, cluster="c", live_values=values)
    assert values.calls == []


def test_the_exemplar_is_cut_at_the_conversation_step_and_its_actions_filled() -> None:
    conversation = [
        *LIVE,
        ChatMessage(role="assistant", content='{"tool": "reset_password", "args": {"email": "ann@example.com"}}'),
        ChatMessage(role="user", content='Result: {"email": "ann@example.com", "reset_link_sent": true}'),
    ]
    system = ChatMessage(role="system", content="the agent's own prompt, mail help@example.com")
    values = Recorder({"<EMAIL_1>": "ann@example.com"})
    rendered = render_messages(RESET, [system, *conversation], cluster="c", live_values=values)
    assert [m.role for m in rendered] == ["system"] + ["user", "assistant"] * 2 + ["user", "assistant", "user"]
    assert rendered[3].text() == 'Result: {"email": "<EMAIL_1>", "reset_link_sent": true}'
    assert rendered[4].text() == '{"tool": "reply_to_customer", "args": {"message": "Sent."}}'
    assert rendered[2].text() == '{"tool": "reset_password", "args": {"email": "ann@example.com"}}'
    assert values.calls == [conversation]  # system messages are not part of the conversation's numbering


def test_native_tool_call_arguments_are_filled_too() -> None:
    """Agents on the tools API act through `tool_calls`, not JSON in the content: their exemplars' calls get
    the live values as well, and the recorded exemplar stays as it was."""
    call = ToolCall(id="call_1", function=FunctionCall(name="reset_password", arguments='{"email": "<EMAIL_1>"}'))
    exemplar = MemoryExemplar(
        id="ex",
        cluster="c",
        task_input="reset for <EMAIL_1>",
        messages=[
            ChatMessage(role="user", content="reset for <EMAIL_1>"),
            ChatMessage(role="assistant", content=None, tool_calls=[call]),
        ],
    )
    harness = Harness(agent="a", system_prompt="Act.", memory=[exemplar], memory_k=1)
    values = Recorder({"<EMAIL_1>": "ann@example.com"})
    rendered = render_messages(harness, LIVE, cluster="c", live_values=values)
    (shown_call,) = rendered[2].tool_calls or []
    assert (
        shown_call.function.arguments == '{"email": "ann@example.com"}' and shown_call.function.name == "reset_password"
    )
    assert rendered[2].content is None and values.calls == [LIVE]
    assert call.function.arguments == '{"email": "<EMAIL_1>"}'
