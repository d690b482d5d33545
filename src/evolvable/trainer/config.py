"""One dataclass configures a training job; every field carries its help text.

Load it from YAML or TOML (`RLConfig.from_file`); the CLI and the control plane build the same object.
Unknown keys are errors, so a typo in a config file never silently trains with a default.
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from evolvable.errors import TrainingError

__all__ = ["RLConfig"]


def _f(default: Any, help: str, **kwargs: Any) -> Any:
    if isinstance(default, list | dict):
        return field(default_factory=lambda: type(default)(default), metadata={"help": help}, **kwargs)
    return field(default=default, metadata={"help": help}, **kwargs)


@dataclass
class RLConfig:
    """Decoupled-PPO LoRA training on stored trajectories. See docs/training.md for the objective."""

    # --- model and adapter
    base_model: str = _f(
        "smollm2-135m",
        "Embedded base model name (evolvable.policy_server.model_loading.MODELS), a local model directory, "
        "or 'tiny-random-llama' (a tiny randomly initialised model for tests and smoke runs).",
    )
    init_adapter: str | None = _f(None, "Start from this LoRA adapter directory instead of a fresh adapter.")
    lora_r: int = _f(16, "LoRA rank.")
    lora_alpha: int = _f(32, "LoRA alpha (the update is scaled by alpha / r).")
    lora_dropout: float = _f(0.0, "Dropout on the LoRA input; 0 keeps proximal and training forwards identical.")
    lora_targets: list[str] = _f(  # noqa: RUF009 (_f builds a default_factory field)
        ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        "Module names that get LoRA adapters (all attention and MLP projections by default).",
    )
    temperature: float = _f(
        1.0,
        "Logits are divided by this before log-softmax; must match how the serving engine computed the "
        "behaviour logprobs (the embedded server and vLLM report untempered logprobs: keep 1.0).",
    )

    # --- objective
    lr: float = _f(1e-4, "AdamW learning rate for the adapter weights.")
    weight_decay: float = _f(0.0, "AdamW weight decay.")
    max_grad_norm: float = _f(1.0, "Gradient clipping by global norm; 0 disables.")
    clip_eps: float = _f(0.2, "PPO clip range on pi_theta / pi_prox (lower side: 1 - clip_eps).")
    clip_eps_high: float | None = _f(None, "Upper clip range (1 + clip_eps_high); None uses clip_eps.")
    behaviour_cap: float = _f(
        5.0, "Cap on the decoupled importance weight pi_prox / pi_behave (truncated importance sampling)."
    )
    kl_coef: float = _f(0.0, "Weight of the k3 KL penalty to the reference (base) model; 0 skips the reference pass.")

    # --- advantages
    gamma: float = _f(1.0, "Discount of rewards backwards over turns (1.0: every turn gets the full outcome).")
    baseline_ema: float = _f(0.1, "EMA rate of the per-cluster running-mean reward baselines.")
    process_coef: float = _f(0.5, "Scale of step-level process, verifier and user-feedback signals.")
    tool_error_penalty: float = _f(0.5, "Reward subtracted from the turn that requested a failing tool call.")
    group_by_task: bool = _f(
        True, "When several runs share a task_id (replay), use their group mean as the baseline (GRPO-style)."
    )
    scale_advantages: bool = _f(False, "Divide advantages by their batch standard deviation (off: Dr.GRPO style).")

    # --- data rules
    harness_version: str | None = _f(None, "Only train on trajectories recorded under this harness version.")
    allow_other_harness: bool = _f(False, "Keep samples from other harness versions instead of excluding them.")
    policy_versions: list[str] = _f(  # noqa: RUF009
        [],
        "Policy versions oldest to newest, the last being the one training starts from (staleness is measured "
        "in positions on this list). Empty: staleness is not checked.",
    )
    max_staleness: int = _f(4, "Exclude samples produced more than this many policy versions before the current one.")
    staleness_decay: float = _f(1.0, "Down-weight each sample by decay**lag (1.0: no down-weighting).")
    allow_unknown_policy_version: bool = _f(
        False, "Keep samples whose policy version is not on `policy_versions` (else excluded)."
    )
    require_outcome: bool = _f(True, "Exclude trajectories without an outcome reward.")
    max_seq_len: int = _f(1024, "Sequences longer than this are excluded (never truncated: that would cut turns).")

    # --- schedule
    epochs: int = _f(1, "Passes over the training set.")
    rollout_batch_size: int = _f(
        32, "Sequences per PPO iteration (all processes together); proximal logprobs are computed once per iteration."
    )
    ppo_epochs: int = _f(1, "Optimisation passes over each PPO iteration's sequences.")
    micro_batch_size: int = _f(4, "Sequences per forward/backward on each process.")
    grad_accum_steps: int = _f(2, "Micro-batches accumulated per optimizer step on each process.")
    seed: int = _f(0, "Seed for data order, adapter initialisation and dropout.")
    mixed_precision: str = _f("no", "accelerate mixed precision: 'no', 'bf16' or 'fp16' (GPU).")

    # --- output
    output_dir: str = _f("runs/rl", "Job directory: checkpoints/, adapter/, metrics.jsonl, manifest.")
    checkpoint_interval: int = _f(1, "Save a resumable checkpoint every this many PPO iterations (0: only at the end).")
    keep_checkpoints: int = _f(2, "How many recent checkpoints to keep.")
    progress: bool = _f(True, "Show Rich progress bars (main process only).")

    def __post_init__(self) -> None:
        problems = []
        if self.lora_r <= 0:
            problems.append("lora_r must be > 0")
        if not 0 < self.clip_eps < 1:
            problems.append("clip_eps must be in (0, 1)")
        if self.behaviour_cap < 1:
            problems.append("behaviour_cap must be >= 1")
        if self.micro_batch_size <= 0 or self.grad_accum_steps <= 0 or self.rollout_batch_size <= 0:
            problems.append("batch sizes must be > 0")
        if self.max_staleness < 0:
            problems.append("max_staleness must be >= 0")
        if not 0 < self.baseline_ema <= 1:
            problems.append("baseline_ema must be in (0, 1]")
        if self.temperature <= 0:
            problems.append("temperature must be > 0")
        if problems:
            raise TrainingError("invalid training config: " + "; ".join(problems))

    # ------------------------------------------------------------------ io

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RLConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise TrainingError(f"unknown training config key(s): {', '.join(unknown)}")
        try:
            return cls(**data)
        except TypeError as err:
            raise TrainingError(f"invalid training config: {err}") from None

    @classmethod
    def from_file(cls, path: str | Path, **overrides: Any) -> RLConfig:
        """Read YAML (.yaml/.yml) or TOML (.toml); keys may sit at the top or under a `train` table."""
        path = Path(path)
        try:
            text = path.read_text()
        except OSError as err:
            raise TrainingError(f"cannot read config {path}: {err}") from None
        try:
            data = tomllib.loads(text) if path.suffix == ".toml" else yaml.safe_load(text)
        except (tomllib.TOMLDecodeError, yaml.YAMLError) as err:
            raise TrainingError(f"config {path} is not valid {path.suffix.lstrip('.') or 'YAML'}: {err}") from None
        data = data or {}
        if not isinstance(data, dict):
            raise TrainingError(f"config {path} must be a mapping of keys to values")
        if isinstance(data.get("train"), dict):
            data = data["train"]
        return cls.from_dict({**data, **overrides})

    @classmethod
    def help_text(cls) -> dict[str, str]:
        """Field name -> help, e.g. for generating CLI or docs."""
        return {f.name: f.metadata["help"] for f in dataclasses.fields(cls)}
