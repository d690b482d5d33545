"""Explored exemplars are redacted before they reach the registry: no personal value survives, and the
placeholders are consistent within an exemplar (the ticket's email is the tool call's email)."""

from __future__ import annotations

from evolvable.app.redaction import exemplar_redactor
from evolvable.protocol.harness import ChatMessage, MemoryExemplar

TICKET = (
    "Ticket from Femi Kim <femi.kim48@example.com>:\n"
    "Update the shipping address of order 44772 to: 51 Harbor Road, Fairview. Thanks!"
)


def _exemplar() -> MemoryExemplar:
    return MemoryExemplar(
        id="ex",
        cluster="address_change",
        task_input=TICKET,
        messages=[
            ChatMessage(role="user", content=TICKET),
            ChatMessage(
                role="assistant", content='{"tool": "update_address", "args": {"address": "51 Harbor Road, Fairview"}}'
            ),
            ChatMessage(
                role="assistant", content='{"tool": "reset_password", "args": {"email": "femi.kim48@example.com"}}'
            ),
        ],
    )


def test_no_personal_value_survives_and_placeholders_are_consistent() -> None:
    out = exemplar_redactor()(_exemplar())
    texts = [out.task_input, *(m.text() for m in out.messages)]
    for value in ("Femi", "Kim", "femi.kim48", "Harbor"):
        assert not any(value in t for t in texts), value
    assert "<EMAIL_1>" in texts[1] and '"email": "<EMAIL_1>"' in texts[3]
    assert "to: <ADDRESS_1>, Fairview" in texts[1] and '"address": "<ADDRESS_1>, Fairview"' in texts[2]
    assert "order 44772" in texts[1]  # order numbers are not personal data: the exemplar keeps them
