"""Explored exemplars are redacted before they reach the registry, with stand-ins where the model copies values."""

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


def test_no_personal_value_survives_and_stand_ins_are_consistent() -> None:
    out = exemplar_redactor()(_exemplar())
    texts = [out.task_input, *(m.text() for m in out.messages)]
    for value in ("Femi", "Kim", "femi.kim48", "Harbor"):
        assert not any(value in t for t in texts), value
    email = "customer1@example.com"
    assert email in texts[1] and email in texts[3]  # the ticket's address is the one the tool call uses
    assert "to: 1 Example Street, Fairview" in texts[1] and '"address": "1 Example Street, Fairview"' in texts[2]
    assert "order 44772" in texts[1]  # order numbers are not personal data: the exemplar keeps them


def test_placeholders_when_asked() -> None:
    out = exemplar_redactor(surrogates=False)(_exemplar())
    assert "<EMAIL_1>" in out.messages[0].text() and '"email": "<EMAIL_1>"' in out.messages[2].text()
