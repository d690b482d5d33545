from __future__ import annotations

import pytest

from evolvable.workloads.support_desk import Action, ActionParseError, parse_action


@pytest.mark.parametrize(
    ("text", "tool", "args"),
    [
        ('{"tool": "lookup_order", "args": {"order_id": "12345"}}', "lookup_order", {"order_id": "12345"}),
        (
            '```json\n{"tool": "lookup_order", "args": {"order_id": "12345"}}\n```',
            "lookup_order",
            {"order_id": "12345"},
        ),
        (
            'Sure! {"tool": "lookup_order", "args": {"order_id": "12345"}} Hope that helps.',
            "lookup_order",
            {"order_id": "12345"},
        ),
        (
            "{'tool': 'reset_password', 'args': {'email': 'a@example.com'}}",
            "reset_password",
            {"email": "a@example.com"},
        ),
        ('{"name": "escalate", "arguments": {"reason": "legal"}}', "escalate", {"reason": "legal"}),
        ('{"name": "escalate", "arguments": "{\\"reason\\": \\"legal\\"}"}', "escalate", {"reason": "legal"}),
        ('{"tool": "lookup_order", "order_id": "12345"}', "lookup_order", {"order_id": "12345"}),
        (
            '{"tool": "lookup_order", "args": {"order_id": 12345, "x": true}}',
            "lookup_order",
            {"order_id": 12345, "x": True},
        ),
        ('lookup_order(order_id="12345")', "lookup_order", {"order_id": "12345"}),
        ("lookup_order('12345')", "lookup_order", {"order_id": "12345"}),
        (
            '{"tool": "reply_to_customer", "args": {"message": "Your order is shipp',
            "reply_to_customer",
            {"message": "Your order is shipp"},
        ),
        ('{"tool": "reply_to_customer", "args": {"message": "a {b} c"}}', "reply_to_customer", {"message": "a {b} c"}),
    ],
)
def test_near_misses_are_read(text: str, tool: str, args: dict) -> None:
    action = parse_action(text)
    assert (action.tool, action.args, action.implicit_reply) == (tool, args, False)


def test_prose_is_the_final_reply() -> None:
    assert parse_action("  Your order is on its way.\n") == Action(
        "reply_to_customer", {"message": "Your order is on its way."}, implicit_reply=True
    )


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        '{"tool": ',
        '{"args": {"order_id": "1"}}',
        "call lookup_order now",
        '{"tool": "x", "args": [1]}',
        "{'tool': 'lookup_order', 'args': {'order_id': ...}}",  # a Python literal, not JSON: once crashed a run
    ],
)
def test_failed_attempts_raise(text: str) -> None:
    with pytest.raises(ActionParseError):
        parse_action(text)
