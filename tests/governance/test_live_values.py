"""The live conversation's values under the placeholders its own redaction gives them (real engine)."""

from __future__ import annotations

from evolvable.app.redaction import exemplar_redactor
from evolvable.governance.redaction import PlaceholderMap, RedactionEngine, live_values, placeholder_values
from evolvable.protocol.harness import fill_placeholders, render_messages
from evolvable.protocol.models import ChatMessage, FunctionCall, ToolCall
from evolvable.workloads.support_desk.harnesses import default_harness, oracle_exemplars
from evolvable.workloads.support_desk.tasks import generate_tasks


def user(text: str) -> ChatMessage:
    return ChatMessage(role="user", content=text)


def test_values_are_numbered_by_first_appearance_as_redaction_numbers_them() -> None:
    engine = RedactionEngine(cache=False)
    conversation = [
        user("From Ann Lee: my old mail is ann@example.com, use ann.lee@example.org from now on"),
        ChatMessage(role="assistant", content='{"tool": "update_email", "args": {"email": "ANN@example.com"}}'),
        user("and copy bob@example.net"),
    ]
    values = placeholder_values(engine, conversation)
    assert values == {
        "<PERSON_1>": "Ann Lee",
        "<EMAIL_1>": "ann@example.com",  # the same email again (any case) keeps its number and first spelling
        "<EMAIL_2>": "ann.lee@example.org",
        "<EMAIL_3>": "bob@example.net",
    }
    placeholders = PlaceholderMap()
    redacted = [engine.redact_text(m.text(), placeholders) for m in conversation]
    assert redacted[0] == "From <PERSON_1>: my old mail is <EMAIL_1>, use <EMAIL_2> from now on"
    assert redacted[1] == '{"tool": "update_email", "args": {"email": "<EMAIL_1>"}}'
    assert [fill_placeholders(redacted[i], values) for i in (0, 2)] == [conversation[i].text() for i in (0, 2)]


def test_tool_call_arguments_count_and_a_conversation_without_values_gives_none() -> None:
    call = ToolCall(id="c1", function=FunctionCall(name="reset", arguments='{"email": "zoe@example.com"}'))
    conversation = [user("reset it please"), ChatMessage(role="assistant", content=None, tool_calls=[call])]
    assert live_values(conversation) == {"<EMAIL_1>": "zoe@example.com"}
    assert live_values([user("where is my order?")]) == {}
    assert live_values([user("Ticket from <PERSON_1> <<EMAIL_1>>")]) == {}  # placeholders are no values


def test_a_redacted_exemplar_renders_with_the_live_ticket_values() -> None:
    """End to end with the real redaction: the exemplar the memory lever serves, the ticket at hand."""
    redact = exemplar_redactor()
    for intent in ("password_reset", "address_change"):
        example = generate_tasks("train", 1, seed=7, intents=[intent])[0]
        exemplar = redact(oracle_exemplars([example])[0])
        first_action = exemplar.messages[1].text()
        assert "<" in first_action and example.customer.email not in first_action  # redacted as stored
        live = generate_tasks("holdout", 1, seed=11, intents=[intent])[0]
        harness = default_harness(memory=[exemplar])
        rendered = render_messages(harness, [user(live.prompt())], cluster=intent, live_values=live_values)
        shown = rendered[2].text()  # the exemplar's first action, the one the model copies
        expected = live.expected
        value = expected.email if intent == "password_reset" else expected.new_address
        assert value and value in shown, shown
        assert "<" not in shown and example.customer.email not in shown
