"""Synthetic trajectories shaped like what the proxy records (engine token ids, logprobs, signals)."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator

import pytest

from evolvable.protocol.models import ChatMessage, CompletionChoice, LLMCallStep, Signal, Trajectory

TrajectoryFactory = Callable[..., Trajectory]


def make_trajectory(
    rng: random.Random,
    *,
    turns: int = 1,
    outcome: float | None = 1.0,
    cluster: str = "a",
    task_id: str | None = None,
    policy_version: str | None = None,
    harness_version: str | None = None,
    status: str = "completed",
    vocab: int = 256,
    with_logprobs: bool = True,
    completion: list[int] | None = None,
) -> Trajectory:
    """A run of `turns` llm calls whose prompts extend each other (one merged sequence)."""
    context: list[int] = [rng.randrange(1, vocab) for _ in range(rng.randint(3, 6))]
    steps = []
    for _ in range(turns):
        tokens = (
            list(completion) if completion is not None else [rng.randrange(1, vocab) for _ in range(rng.randint(2, 5))]
        )
        steps.append(
            LLMCallStep(
                prompt_token_ids=list(context),
                policy_version=policy_version,
                choices=[
                    CompletionChoice(
                        message=ChatMessage(role="assistant", content="x"),
                        completion_token_ids=tokens,
                        logprobs=[-2.0] * len(tokens) if with_logprobs else None,
                    )
                ],
            )
        )
        context = context + tokens + [rng.randrange(1, vocab) for _ in range(2)]  # tool result tokens
    signals = [Signal(kind="outcome", value=outcome)] if outcome is not None else []
    return Trajectory(
        status=status,
        task_id=task_id,
        policy_version=policy_version,
        harness_version=harness_version,
        metadata={"cluster": cluster},
        steps=steps,
        signals=signals,
    )


@pytest.fixture(scope="module")
def trajectory_factory() -> TrajectoryFactory:
    rng = random.Random(7)
    return lambda **kw: make_trajectory(rng, **kw)


@pytest.fixture
def synthetic_set(trajectory_factory: TrajectoryFactory) -> list[Trajectory]:
    """16 single- and two-turn runs over two clusters with mixed outcomes."""
    return [
        trajectory_factory(turns=1 + i % 2, outcome=float(i % 3 == 0), cluster="a" if i % 2 else "b") for i in range(16)
    ]


@pytest.fixture(autouse=True)
def _fresh_accelerate_state() -> Iterator[None]:
    """accelerate keeps one device per process: a test that trained on a GPU must not decide the device
    of the next test's `Accelerator(cpu=True)`."""
    yield
    import sys

    if "accelerate" in sys.modules:
        from accelerate.state import AcceleratorState

        AcceleratorState._reset_state(reset_partial_state=True)
