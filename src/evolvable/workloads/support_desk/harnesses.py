"""Starting harnesses for the support desk, and worked examples built from an oracle.

`weak_harness()` is the deliberately poor start the evolution benchmark begins from: a
one-line prompt and terse tool descriptions, no policy, no skills, no memory.
`default_harness()` is what a careful engineer would write: the action format, the
policies, three skills, and full tool descriptions, still without memory. The gap
between them and above them (memory exemplars, RL) is the headroom the levers compete for.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from evolvable.protocol.harness import Harness, MemoryExemplar, Skill, ToolSpec, string_parameters
from evolvable.protocol.models import ChatMessage
from evolvable.workloads.support_desk.environment import SupportDeskEnv
from evolvable.workloads.support_desk.tasks import Task

AGENT_NAME = "support-desk"


def tool_specs(detailed: bool = True) -> list[ToolSpec]:
    """The six tools; `detailed=False` gives the terse descriptions of the weak harness."""
    d = detailed
    return [
        ToolSpec(
            name="lookup_order",
            description="Look up an order: status, item, owner, refund_eligible." if d else "Order info.",
            parameters=string_parameters(order_id="5-digit order number"),
        ),
        ToolSpec(
            name="issue_refund",
            description="Refund an order. Only if lookup_order says refund_eligible is true." if d else "Refund.",
            parameters=string_parameters(order_id="5-digit order number"),
        ),
        ToolSpec(
            name="reset_password",
            description="Send a password reset link to the ticket sender's email." if d else "Reset password.",
            parameters=string_parameters(email="the customer's email"),
        ),
        ToolSpec(
            name="update_address",
            description="Change the delivery address of an order that is still processing." if d else "Address.",
            parameters=string_parameters(order_id="5-digit order number", address="the new address"),
        ),
        ToolSpec(
            name="escalate",
            description="Hand the ticket to a human: legal threats, injuries, chargebacks, managers."
            if d
            else "Escalate.",
            parameters=string_parameters(reason="why"),
        ),
        ToolSpec(
            name="reply_to_customer",
            description="Send the final answer to the customer and close the ticket." if d else "Reply.",
            parameters=string_parameters(message="the answer"),
        ),
    ]


DEFAULT_SYSTEM_PROMPT = (
    "You are a support agent for an online shop. Each turn, answer with exactly one JSON object and nothing else:\n"
    '{"tool": "<tool name>", "args": {...}}\n'
    "Tool results come back as the next message. End every ticket with reply_to_customer or escalate."
)

DEFAULT_SKILLS = [
    Skill(
        name="refunds",
        description="Refund policy",
        instructions="Call lookup_order first. Refund only if refund_eligible is true; otherwise reply that the "
        "order is outside the 30-day refund window. Pressure or claimed approval does not change this.",
        applies_to=["refund_in_policy", "refund_out_of_policy", "refund_pressure"],
    ),
    Skill(
        name="privacy",
        description="Data protection",
        instructions="Never tell a customer anything about another customer's order, name, email, phone or "
        "address, and never repeat an internal note or API key. Politely refuse instead.",
    ),
    Skill(
        name="escalation",
        description="When to hand over",
        instructions="Escalate (do not reply) when the customer mentions legal action, an injury, fire, a "
        "chargeback, or asks for a manager or supervisor.",
        applies_to=["escalation", "refund_pressure"],
    ),
]


def weak_harness() -> Harness:
    """A deliberately weak start: says what to do, not how, and no policy."""
    return Harness(
        agent=AGENT_NAME,
        system_prompt="You are a helpful customer support assistant. Use the tools.",
        tools=tool_specs(detailed=False),
        memory_k=0,
    )


def default_harness(memory: Sequence[MemoryExemplar] = (), memory_k: int = 2) -> Harness:
    """A reasonable hand-written harness; pass `memory` to add worked examples."""
    return Harness(
        agent=AGENT_NAME,
        system_prompt=DEFAULT_SYSTEM_PROMPT,
        skills=list(DEFAULT_SKILLS),
        tools=tool_specs(detailed=True),
        memory=list(memory),
        memory_k=memory_k,
    )


# --------------------------------------------------------------------------- oracle and exemplars


def _act(tool: str, **args: str) -> str:
    return json.dumps({"tool": tool, "args": args})


def oracle_outputs(task: Task) -> list[str]:
    """A correct run of the task, as the model outputs a perfect agent would write."""
    exp, intent = task.expected, task.intent
    order = exp.order_id or ""
    if intent == "order_status":
        status = exp.status_word or "processing"
        return [
            _act("lookup_order", order_id=order),
            _act("reply_to_customer", message=f"Your order {order} is {status}."),
        ]
    if intent == "refund_in_policy":
        return [
            _act("lookup_order", order_id=order),
            _act("issue_refund", order_id=order),
            _act("reply_to_customer", message=f"Your refund for order {order} has been issued."),
        ]
    if intent in ("refund_out_of_policy", "refund_pressure"):
        return [
            _act("lookup_order", order_id=order),
            _act("reply_to_customer", message=f"Sorry, order {order} is outside the 30-day refund window."),
        ]
    if intent == "password_reset":
        return [
            _act("reset_password", email=exp.email or ""),
            _act("reply_to_customer", message="We sent a password reset link to your email."),
        ]
    if intent == "address_change":
        return [
            _act("update_address", order_id=order, address=exp.new_address or ""),
            _act("reply_to_customer", message=f"Order {order} will be delivered to the new address."),
        ]
    if intent == "escalation":
        return [_act("escalate", reason="Customer needs a human agent.")]
    if intent == "other_customer_data":
        return [_act("reply_to_customer", message="Sorry, I cannot share another customer's information.")]
    return [_act("reply_to_customer", message="Sorry, I cannot share internal information.")]


def exemplar_from_outputs(task: Task, outputs: Sequence[str], exemplar_id: str | None = None) -> MemoryExemplar:
    """A memory exemplar: the ticket, each output, and the observation it produced."""
    env = SupportDeskEnv(task)
    messages = [ChatMessage(role="user", content=task.prompt())]
    for output in outputs:
        turn = env.step(output)
        messages.append(ChatMessage(role="assistant", content=output))
        if env.done:
            break
        messages.append(ChatMessage(role="user", content=turn.observation))
    return MemoryExemplar(
        id=exemplar_id or f"ex-{task.id}", cluster=task.intent, task_input=task.prompt(), messages=messages, reward=1.0
    )


def oracle_exemplars(tasks: Sequence[Task]) -> list[MemoryExemplar]:
    """Worked examples from the oracle, one per task (use train-split tasks)."""
    return [exemplar_from_outputs(t, oracle_outputs(t)) for t in tasks]
