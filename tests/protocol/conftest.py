"""Realistic protocol fixtures: a support agent with parallel tool calls, token ids and signals."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from evolvable.protocol import (
    ChatMessage,
    CompletionChoice,
    FunctionCall,
    HandoffStep,
    LLMCallStep,
    MemoryOpStep,
    MessageStep,
    Signal,
    SignalKind,
    SkillUseStep,
    StepStatus,
    ToolCall,
    ToolCallStep,
    Trajectory,
    TrajectoryStatus,
    Usage,
)

T0 = datetime(2026, 11, 1, 12, 0, 0, tzinfo=UTC)

SYSTEM = {"role": "system", "content": "You are a support agent. Use tools."}
USER = {"role": "user", "content": "Where is my order A-1042? My email is dana@example.com"}
TOOL_CALLS = [
    {"id": "call_1", "type": "function", "function": {"name": "lookup_order", "arguments": '{"order_id": "A-1042"}'}},
    {
        "id": "call_2",
        "type": "function",
        "function": {"name": "lookup_customer", "arguments": '{"email": "dana@example.com"}'},
    },
]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup_order",
            "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "lookup_customer",
            "parameters": {"type": "object", "properties": {"email": {"type": "string"}}},
        },
    },
]


def openai_log_records() -> list[dict[str, Any]]:
    """Two interleaved conversations as an OpenAI-compatible gateway would log them (no session ids)."""
    first_req = {
        "model": "gpt-4o-mini",
        "messages": [SYSTEM, USER],
        "tools": TOOLS,
        "temperature": 0.2,
        "parallel_tool_calls": True,
    }
    first_resp = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "gpt-4o-mini-2024-07-18",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": None, "tool_calls": TOOL_CALLS},
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 120, "completion_tokens": 40, "total_tokens": 160},
    }
    other_req = {"model": "gpt-4o-mini", "messages": [SYSTEM, {"role": "user", "content": "Reset my password please"}]}
    other_resp = {
        "id": "chatcmpl-9",
        "model": "gpt-4o-mini",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "I sent a reset link."}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 30, "completion_tokens": 8, "total_tokens": 38},
    }
    second_req = {
        "model": "gpt-4o-mini",
        "tools": TOOLS,
        "messages": [
            SYSTEM,
            USER,
            {"role": "assistant", "content": None, "tool_calls": TOOL_CALLS},
            {"role": "tool", "tool_call_id": "call_1", "content": '{"status": "shipped", "eta": "2026-11-03"}'},
            {"role": "tool", "tool_call_id": "call_2", "content": '{"name": "Dana", "tier": "gold"}'},
        ],
    }
    second_resp = {
        "id": "chatcmpl-2",
        "model": "gpt-4o-mini",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Your order A-1042 shipped; ETA Nov 3."},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 200, "completion_tokens": 15, "total_tokens": 215},
    }
    return [
        {"request": first_req, "response": first_resp, "started_at": "2026-11-01T12:00:00Z", "latency_ms": 812.5},
        {"request": other_req, "response": other_resp, "started_at": "2026-11-01T12:00:01Z"},
        {"request": second_req, "response": second_resp, "started_at": "2026-11-01T12:00:03Z", "latency_ms": 640.0},
    ]


def rich_trajectory() -> Trajectory:
    """Every step kind, token ids, a step signal, a late outcome, a handoff to a sub-agent."""
    llm1 = LLMCallStep(
        id="step_llm1",
        agent="triage",
        model="smollm2-135m",
        started_at=T0,
        ended_at=T0 + timedelta(milliseconds=300),
        request_messages=[ChatMessage.model_validate(SYSTEM), ChatMessage.model_validate(USER)],
        tools=TOOLS,
        sampling={"temperature": 0.0, "max_tokens": 64, "seed": 7},
        choices=[
            CompletionChoice(
                message=ChatMessage(
                    role="assistant",
                    content=None,
                    tool_calls=[
                        ToolCall(
                            id="call_1", function=FunctionCall(name="lookup_order", arguments='{"order_id": "A-1042"}')
                        )
                    ],
                ),
                finish_reason="tool_calls",
                completion_token_ids=[11, 12, 13],
                logprobs=[-0.1, -0.2, -0.3],
            )
        ],
        prompt_token_ids=[1, 2, 3, 4],
        policy_version="pv-base",
        usage=Usage(prompt_tokens=4, completion_tokens=3, total_tokens=7),
        latency_ms=300.0,
        response_id="chatcmpl-a",
        request_id="req-1",
    )
    tool = ToolCallStep(
        id="step_tool1",
        agent="triage",
        parent_step_id="step_llm1",
        started_at=T0 + timedelta(milliseconds=310),
        tool_name="lookup_order",
        arguments={"order_id": "A-1042"},
        result={"status": "shipped"},
        status=StepStatus.ok,
        tool_call_id="call_1",
        llm_step_id="step_llm1",
        latency_ms=12.0,
    )
    handoff = HandoffStep(
        id="step_handoff",
        agent="triage",
        from_agent="triage",
        to_agent="billing",
        reason="refund question",
        started_at=T0 + timedelta(milliseconds=320),
    )
    mem = MemoryOpStep(
        id="step_mem",
        agent="billing",
        parent_step_id="step_handoff",
        op="retrieve",
        key="refunds",
        items=[{"id": "ex1"}],
        started_at=T0 + timedelta(milliseconds=330),
    )
    skill = SkillUseStep(
        id="step_skill",
        agent="billing",
        skill_name="refund_policy",
        skill_version="v2",
        input="A-1042",
        output="eligible",
        started_at=T0 + timedelta(milliseconds=340),
    )
    msg = MessageStep(id="step_msg", role="user", content="thanks!", started_at=T0 + timedelta(milliseconds=350))
    llm2 = LLMCallStep(
        id="step_llm2",
        agent="billing",
        model="smollm2-135m",
        started_at=T0 + timedelta(milliseconds=360),
        request_messages=[
            ChatMessage.model_validate(SYSTEM),
            ChatMessage.model_validate(USER),
            ChatMessage(role="tool", tool_call_id="call_1", content='{"status": "shipped"}'),
        ],
        choices=[
            CompletionChoice(
                message=ChatMessage(role="assistant", content="It shipped."),
                finish_reason="stop",
                completion_token_ids=[21, 22],
                logprobs=[-0.5, -0.05],
            )
        ],
        prompt_token_ids=[1, 2, 3, 4, 11, 12, 13, 5, 6],
        policy_version="pv-base",
    )
    return Trajectory(
        id="traj_rich",
        tenant_id="acme",
        agent="support",
        end_user="user-77",
        harness_version="h1-abc",
        policy_version="pv-base",
        task_id="task-1",
        task_input={"ticket": "Where is my order A-1042?"},
        status=TrajectoryStatus.completed,
        started_at=T0,
        ended_at=T0 + timedelta(seconds=1),
        metadata={"cluster": "order_status"},
        steps=[llm1, tool, handoff, mem, skill, msg, llm2],
        signals=[
            Signal(
                id="sig_proc",
                kind=SignalKind.process,
                value=1.0,
                step_id="step_tool1",
                label="right_tool",
                source="verifier",
                created_at=T0,
            ),
            Signal(
                id="sig_out",
                kind=SignalKind.outcome,
                value=1.0,
                source="verifier",
                created_at=T0 + timedelta(seconds=5),
            ),
        ],
    )


@pytest.fixture
def trajectory() -> Trajectory:
    return rich_trajectory()


@pytest.fixture(name="openai_log")
def openai_log_fixture() -> list[dict[str, Any]]:
    return openai_log_records()
