"""Token-level RL samples from ATDP trajectories.

The rules follow what works in the field (see ANCHORS.md):
- Token ids are the engine's own (`prompt_token_ids`, `completion_token_ids`); text is never
  re-tokenized, because re-tokenizing drifts from what the policy actually sampled.
- Multi-turn runs become one sequence while each turn's prompt extends the tokens so far
  (prompt + completion of the previous turn); the extension (tool results, user turns, template
  tokens) gets loss mask 0. When a prompt does not extend the sequence, a new sequence starts.
- A call whose prompt is repeated verbatim by the next call was retried: it is dropped as an orphan.
- Failed calls (status error) and calls without a completion carry nothing to learn from.
- Only choice 0 continues the conversation; extra choices (n > 1) become single-turn sequences.
- Completion tokens that governance replaced with a tokenized placeholder (`redacted_token_spans`) were
  never sampled by the policy: they stay in the sequence (the context must read as stored) with loss
  mask 0, so neither the loss nor the importance ratios see them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import Field, model_validator

from evolvable.errors import ConversionError
from evolvable.protocol.models import CompletionChoice, LLMCallStep, StepStatus, StrictModel, Trajectory


class RLSample(StrictModel):
    """One training sequence. Per-token lists all have len(input_ids)."""

    sample_id: str
    trajectory_id: str
    tenant_id: str = "default"
    agent: str = "default"
    step_ids: list[str] = Field(description="The llm_call steps whose completions are in this sequence, in order.")
    input_ids: list[int]
    loss_mask: list[int] = Field(
        description="1 on tokens the policy generated; 0 on prompt, tool and user tokens and on completion tokens "
        "redaction replaced."
    )
    behaviour_logprobs: list[float] | None = Field(
        None, description="Logprob of each token under the behaviour policy; 0.0 where loss_mask is 0."
    )
    token_turn: list[int] = Field(description="Index into step_ids for generated tokens, -1 elsewhere.")
    token_policy_versions: list[str | None] = Field(description="Policy version that produced each token.")
    reward: float | None = None
    advantages: list[float] | None = None
    harness_version: str | None = None
    policy_version: str | None = Field(None, description="Version of the latest turn in the sequence.")
    task_id: str | None = None
    cluster: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _aligned(self) -> RLSample:
        n = len(self.input_ids)
        lists: dict[str, Sequence[object]] = {
            "loss_mask": self.loss_mask,
            "token_turn": self.token_turn,
            "token_policy_versions": self.token_policy_versions,
        }
        if self.behaviour_logprobs is not None:
            lists["behaviour_logprobs"] = self.behaviour_logprobs
        if self.advantages is not None:
            lists["advantages"] = self.advantages
        bad = [k for k, v in lists.items() if len(v) != n]
        if bad:
            raise ValueError(f"{', '.join(bad)} must have len(input_ids)={n}")
        return self

    @property
    def num_generated(self) -> int:
        return sum(self.loss_mask)


class _Builder:
    def __init__(self, trajectory: Trajectory, index: int) -> None:
        self.t = trajectory
        self.index = index
        self.ids: list[int] = []
        self.mask: list[int] = []
        self.logprobs: list[float] | None = []
        self.turn: list[int] = []
        self.versions: list[str | None] = []
        self.step_ids: list[str] = []
        self.policy_version: str | None = None

    def add_context(self, tokens: list[int]) -> None:
        self.ids += tokens
        self.mask += [0] * len(tokens)
        if self.logprobs is not None:
            self.logprobs += [0.0] * len(tokens)
        self.turn += [-1] * len(tokens)
        self.versions += [None] * len(tokens)

    def add_completion(self, step: LLMCallStep, choice: CompletionChoice) -> None:
        tokens, logprobs = choice.completion_token_ids or [], choice.logprobs
        k = len(self.step_ids)
        self.step_ids.append(step.id)
        redacted = choice.redacted_token_mask()
        self.ids += tokens
        self.mask += [0 if r else 1 for r in redacted]
        if logprobs is None:
            self.logprobs = None
        elif self.logprobs is not None:
            self.logprobs += [0.0 if r else lp for lp, r in zip(logprobs, redacted, strict=True)]
        self.turn += [k] * len(tokens)
        self.versions += [step.policy_version] * len(tokens)
        self.policy_version = step.policy_version

    def build(self) -> RLSample:
        meta = self.t.metadata
        return RLSample(
            sample_id=f"{self.t.id}:{self.index}",
            trajectory_id=self.t.id,
            tenant_id=self.t.tenant_id,
            agent=self.t.agent,
            step_ids=self.step_ids,
            input_ids=self.ids,
            loss_mask=self.mask,
            behaviour_logprobs=self.logprobs,
            token_turn=self.turn,
            token_policy_versions=self.versions,
            reward=self.t.outcome(),
            harness_version=self.t.harness_version,
            policy_version=self.policy_version or self.t.policy_version,
            task_id=self.t.task_id,
            cluster=meta.get("cluster") if isinstance(meta.get("cluster"), str) else None,
        )


def _usable_calls(trajectory: Trajectory) -> list[LLMCallStep]:
    calls = [c for c in trajectory.llm_calls() if c.status == StepStatus.ok and c.choices]
    missing = [c.id for c in calls if not c.has_token_ids]
    if missing:
        raise ConversionError(
            f"trajectory {trajectory.id}: llm_call step(s) {', '.join(missing[:3])} carry no engine token ids; "
            "RL samples need them (enable token capture: return_token_ids on a vLLM-compatible upstream)"
        )
    # A call whose exact prompt is sent again by the next call was retried: drop it as an orphan.
    return [
        c
        for i, c in enumerate(calls)
        if not (i + 1 < len(calls) and calls[i + 1].prompt_token_ids == c.prompt_token_ids)
    ]


def trajectory_to_samples(trajectory: Trajectory) -> list[RLSample]:
    """Turn one trajectory into token-level samples; raises ConversionError without token ids."""
    calls = _usable_calls(trajectory)
    if not calls:
        return []
    samples: list[RLSample] = []
    current: _Builder | None = None
    extra: list[tuple[LLMCallStep, int]] = []
    for call in calls:
        prompt = call.prompt_token_ids or []
        first = call.choices[0]
        if current is not None and len(prompt) >= len(current.ids) and prompt[: len(current.ids)] == current.ids:
            current.add_context(prompt[len(current.ids) :])
        else:
            if current is not None:
                samples.append(current.build())
            current = _Builder(trajectory, len(samples))
            current.add_context(prompt)
        current.add_completion(call, first)
        extra += [(call, i) for i in range(1, len(call.choices))]
    assert current is not None
    samples.append(current.build())
    for call, choice_index in extra:
        b = _Builder(trajectory, len(samples))
        b.add_context(call.prompt_token_ids or [])
        b.add_completion(call, call.choices[choice_index])
        sample = b.build()
        sample.metadata["choice_index"] = choice_index
        samples.append(sample)
    return samples
