"""Store fixtures and a realistic trajectory builder (every step kind, signals on steps)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from evolvable.protocol.models import (
    ChatMessage,
    CompletionChoice,
    FunctionCall,
    HandoffStep,
    LLMCallStep,
    MemoryOpStep,
    MessageStep,
    Signal,
    SkillUseStep,
    ToolCall,
    ToolCallStep,
    Trajectory,
    TrajectoryStatus,
    Usage,
    new_id,
)
from evolvable.store import Store, metadata

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


def _create_database(base_url: str, prefix: str) -> tuple[sa.Engine, str, str]:
    name = f"{prefix}_{uuid.uuid4().hex[:16]}"
    admin = sa.create_engine(base_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    return admin, name, base_url.rsplit("/", 1)[0] + f"/{name}"


def _drop_database(admin: sa.Engine, name: str) -> None:
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture(scope="session")
def _migrated_postgres(postgres_url: str) -> Iterator[str]:
    """One PostgreSQL database for the store tests, migrated once; each test starts from empty tables."""
    admin, name, url = _create_database(postgres_url, "store")
    Store.open(url).close()
    try:
        yield url
    finally:
        _drop_database(admin, name)


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """Overrides the shared fixture for store tests: same backends and isolation, but PostgreSQL tests
    empty a migrated database instead of creating one each (~2 s saved per test)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'store.db'}"
        return
    url = request.getfixturevalue("_migrated_postgres")
    engine = sa.create_engine(url)
    with engine.begin() as conn:  # DELETE beats TRUNCATE on tiny tables; children first for foreign keys
        for table in reversed(metadata.sorted_tables):
            conn.execute(table.delete())
    engine.dispose()
    yield url


@pytest.fixture(params=["sqlite", "postgresql"])
def blank_db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database with no tables at all (for migration tests)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'blank.db'}"
        return
    admin, name, url = _create_database(request.getfixturevalue("postgres_url"), "blank")
    try:
        yield url
    finally:
        _drop_database(admin, name)


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    s = Store.open(db_url)
    try:
        yield s
    finally:
        s.close()


def support_trajectory(
    *,
    started_at: datetime = T0,
    tenant_id: str = "default",
    agent: str = "support",
    status: TrajectoryStatus = TrajectoryStatus.completed,
    outcome: float | None = 1.0,
    **header: object,
) -> Trajectory:
    """A support-desk run: user turn, an LLM call requesting a tool, the tool result, a handoff to a
    sub-agent that reads memory and uses a skill, the final answer; signals on the tool and the run."""
    call_id = f"call_{new_id('x')[-8:]}"
    ask = MessageStep(role="user", content="Where is my order 1234?", started_at=started_at)
    plan = LLMCallStep(
        model="smollm2-135m",
        started_at=started_at + timedelta(seconds=1),
        request_messages=[
            ChatMessage(role="system", content="You are a support agent."),
            ChatMessage(role="user", content="Where is my order 1234?"),
        ],
        tools=[{"type": "function", "function": {"name": "lookup_order", "parameters": {"type": "object"}}}],
        sampling={"temperature": 0.2, "max_tokens": 64},
        choices=[
            CompletionChoice(
                message=ChatMessage(
                    role="assistant",
                    tool_calls=[
                        ToolCall(id=call_id, function=FunctionCall(name="lookup_order", arguments='{"id":1234}'))
                    ],
                ),
                finish_reason="tool_calls",
                completion_token_ids=[11, 12, 13],
                logprobs=[-0.1, -0.25, -0.05],
            )
        ],
        prompt_token_ids=[1, 2, 3, 4],
        policy_version="base",
        usage=Usage(prompt_tokens=4, completion_tokens=3, total_tokens=7),
        latency_ms=42.5,
        response_id=f"chatcmpl-{new_id('r')[-10:]}",
    )
    tool = ToolCallStep(
        tool_name="lookup_order",
        arguments={"id": 1234},
        result={"status": "shipped", "eta": "2026-11-03"},
        status="ok",
        tool_call_id=call_id,
        llm_step_id=plan.id,
        parent_step_id=plan.id,
        latency_ms=3.0,
        started_at=started_at + timedelta(seconds=2),
    )
    hand = HandoffStep(from_agent=agent, to_agent="billing", reason="refund question", started_at=started_at)
    memory = MemoryOpStep(op="retrieve", key="refunds", items=[{"q": "refund", "a": "5 days"}], agent="billing")
    skill = SkillUseStep(
        skill_name="refund_policy", skill_version="v2", input={"order": 1234}, output="ok", agent="billing"
    )
    answer = LLMCallStep(
        model="smollm2-135m",
        parent_step_id=hand.id,
        agent="billing",
        choices=[
            CompletionChoice(message=ChatMessage(role="assistant", content="It ships on Nov 3."), finish_reason="stop")
        ],
    )
    signals = [Signal(kind="tool_error", value=0.0, step_id=tool.id, source="verifier", label="ok")]
    if outcome is not None:
        signals.append(Signal(kind="outcome", value=outcome, source="verifier", confidence=0.9))
    return Trajectory(
        tenant_id=tenant_id,
        agent=agent,
        status=status,
        started_at=started_at,
        ended_at=None if status == TrajectoryStatus.running else started_at + timedelta(seconds=5),
        task_input={"ticket": "Where is my order 1234?"},
        metadata={"intent": "order_status", "split": "train"},
        steps=[ask, plan, tool, hand, memory, skill, answer],
        signals=signals,
        **header,  # type: ignore[arg-type]
    )


@pytest.fixture
def make_trajectory() -> object:
    """The `support_trajectory` builder (fixtures, because test modules are imported in importlib mode)."""
    return support_trajectory
