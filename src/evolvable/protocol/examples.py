"""An example trajectory in ATDP: a realistic two-call support run, every field a test, a benchmark or a
document may want to vary exposed as a keyword (benchmarks build their load from it; tests their cases)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from evolvable.protocol.models import (
    ChatMessage,
    CompletionChoice,
    FunctionCall,
    LLMCallStep,
    Signal,
    SignalKind,
    StepStatus,
    ToolCall,
    ToolCallStep,
    Trajectory,
    TrajectoryStatus,
    Usage,
)


def make_trajectory(
    *,
    tenant_id: str = "acme",
    agent: str = "support",
    end_user: str | None = "user-1",
    question: str = "Where is my order 4411?",
    answer: str = "Your order 4411 ships tomorrow.",
    tool_args: dict[str, Any] | None = None,
    tool_result: Any = None,
    status: TrajectoryStatus = TrajectoryStatus.completed,
    finish_reason: str = "stop",
    token_ids: bool = True,
    error: bool = False,
    outcome: float | None = 1.0,
    started_at: datetime | None = None,
    task_id: str | None = None,
    harness_version: str | None = "h1-abc",
    policy_version: str | None = "p1-base",
) -> Trajectory:
    """A two-call support run: a tool call, its result, and a final answer."""
    lookup = ChatMessage(
        role="assistant",
        tool_calls=[ToolCall(id="call_1", function=FunctionCall(name="lookup_order", arguments='{"id": 4411}'))],
    )
    first = LLMCallStep(
        model="m",
        request_messages=[
            ChatMessage(role="system", content="You are support."),
            ChatMessage(role="user", content=question),
        ],
        choices=[
            CompletionChoice(
                message=lookup,
                finish_reason="tool_calls",
                completion_token_ids=[5, 6, 7] if token_ids else None,
                logprobs=[-0.1, -0.2, -0.3] if token_ids else None,
            )
        ],
        prompt_token_ids=[1, 2, 3, 4] if token_ids else None,
        usage=Usage(prompt_tokens=4, completion_tokens=3, total_tokens=7),
        latency_ms=12.0,
        policy_version=policy_version,
    )
    tool = ToolCallStep(
        tool_name="lookup_order",
        arguments=tool_args if tool_args is not None else {"id": 4411},
        result=tool_result if tool_result is not None else {"status": "shipped"},
        status=StepStatus.ok,
        tool_call_id="call_1",
        llm_step_id=first.id,
    )
    second = LLMCallStep(
        model="m",
        request_messages=[
            *first.request_messages,
            lookup,
            ChatMessage(role="tool", tool_call_id="call_1", content='{"status": "shipped"}'),
        ],
        choices=[
            CompletionChoice(
                message=ChatMessage(role="assistant", content=answer),
                finish_reason=finish_reason,
                completion_token_ids=[8, 9] if token_ids else None,
                logprobs=[-0.5, -0.6] if token_ids else None,
            )
        ],
        prompt_token_ids=[1, 2, 3, 4, 5, 6, 7, 10] if token_ids else None,
        status=StepStatus.error if error else StepStatus.ok,
        policy_version=policy_version,
    )
    extra: dict[str, Any] = {}
    if started_at is not None:
        extra["started_at"] = started_at
    t = Trajectory(
        tenant_id=tenant_id,
        agent=agent,
        end_user=end_user,
        task_input={"ticket": question},
        task_id=task_id,
        status=status,
        harness_version=harness_version,
        policy_version=policy_version,
        steps=[first, tool, second],
        metadata={"intent": "order_status"},
        **extra,
    )
    if outcome is not None:
        t.signals = [Signal(kind=SignalKind.outcome, value=outcome, source="verifier")]
    if status != TrajectoryStatus.running:
        t.ended_at = t.started_at
    return t
