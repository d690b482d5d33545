"""Exemplars carry fictitious stand-ins, not redaction placeholders: the agent's model imitates them."""

from __future__ import annotations

from evolvable.control.evolvers.memory import exemplar_from_trajectory
from evolvable.control.surrogates import with_surrogates

from .conftest import make_trajectory


def test_placeholders_become_consistent_stand_ins_and_unknown_kinds_stay() -> None:
    text = "Ticket from <PERSON_1> <<EMAIL_1>>: move order 4 to <ADDRESS_1>; cc <EMAIL_2>; key <OPENAI_KEY_1>"
    out = with_surrogates(text)
    assert out == (
        "Ticket from Customer <customer1@example.com>: move order 4 to 1 Example Street; "
        "cc customer2@example.com; key <OPENAI_KEY_1>"
    )
    assert with_surrogates("no placeholder <here> or <lower_1>") == "no placeholder <here> or <lower_1>"


def test_an_exemplar_from_a_redacted_run_uses_the_same_stand_in_in_ticket_and_tool_call() -> None:
    ticket = "Ticket from <PERSON_1> <<EMAIL_1>>: please reset my password"
    t = make_trajectory(cluster="password_reset", success=True, harness_version=None, task_text=ticket)
    t.task_input = ticket
    last = t.steps[0]
    last.request_messages[4].content = '{"tool": "reset_password", "args": {"email": "<EMAIL_1>"}}'
    ex = exemplar_from_trajectory(t, "password_reset")
    assert ex is not None
    assert ex.task_input == "Ticket from Customer <customer1@example.com>: please reset my password"
    texts = [m.text() for m in ex.messages]
    assert texts[0] == ex.task_input
    assert '"email": "customer1@example.com"' in texts[1]
    assert not any("<EMAIL_1>" in x or "<PERSON_1>" in x for x in texts)
