"""The training loop: decoupled PPO on LoRA adapters, one file, top to bottom, on `accelerate`.

The same code runs on one CPU, one GPU, or many GPUs and nodes:

    python -m evolvable.trainer.loop --config job.yaml --samples samples.jsonl           # one process
    torchrun --nproc_per_node 2 -m evolvable.trainer.loop --config job.yaml ...          # CPU, gloo
    accelerate launch --config_file fsdp.yaml -m evolvable.trainer.loop --config ...     # GPUs, FSDP

The distributed engine is accelerate's (DDP, FSDP or DeepSpeed as configured); this file only
shards the sequences across processes and normalises the loss per token over the whole optimizer
step. The job directory (`output_dir`) must be on a filesystem every process sees.

Per PPO iteration (`rollout_batch_size` sequences):
  1. proximal logprobs: a no-grad forward pass of the current policy (and, with kl_coef > 0, of the
     reference = the base model with the adapter disabled);
  2. `ppo_epochs` passes of micro-batches -> decoupled PPO loss (loss.py) -> optimizer steps;
  3. a checkpoint (adapter weights, optimizer, RNG, progress, baselines) every `checkpoint_interval`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evolvable.errors import TrainingError
from evolvable.telemetry.metrics import TRAINER_REWARD, observe_training_step
from evolvable.trainer.advantages import RunningBaselines
from evolvable.trainer.config import RLConfig
from evolvable.trainer.samples import (
    SamplesSource,
    SampleStats,
    TrainingSample,
    build_training_set,
    describe_source,
    iter_trajectories,
    read_samples_jsonl,
    write_samples_jsonl,
)

if TYPE_CHECKING:
    import torch
    from accelerate import Accelerator
    from rich.progress import Progress, TaskID
    from transformers import PreTrainedModel

__all__ = ["TrainingResult", "load_policy_model", "run_training_job", "train_on_samples"]

TINY_MODEL = "tiny-random-llama"


@dataclass
class TrainingResult:
    """What a job produced. `adapter_dir` is None on non-main processes and when nothing was trained."""

    output_dir: str
    adapter_dir: str | None
    optimizer_steps: int
    iterations: int
    sample_stats: dict[str, Any]
    metrics: dict[str, float]
    baselines: dict[str, Any]
    data: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    resumed_from: str | None = None
    snapshots: dict[int, str] = field(default_factory=dict)


class JobState:
    """Progress and baselines, saved inside every accelerate checkpoint (register_for_checkpointing)."""

    def __init__(self, baselines: RunningBaselines) -> None:
        self.iteration = 0
        self.optimizer_steps = 0
        self.tokens = 0
        self.baselines = baselines

    def state_dict(self) -> dict[str, Any]:
        return {
            "iteration": self.iteration,
            "optimizer_steps": self.optimizer_steps,
            "tokens": self.tokens,
            "baselines": self.baselines.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.iteration = int(state["iteration"])
        self.optimizer_steps = int(state["optimizer_steps"])
        self.tokens = int(state["tokens"])
        self.baselines.load_state_dict(state["baselines"])


# ----------------------------------------------------------------------------- model


def load_policy_model(config: RLConfig) -> PreTrainedModel:
    """The base model to put LoRA on: an embedded model, a local directory, or the tiny test model."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

    model: PreTrainedModel
    if config.base_model == TINY_MODEL:
        torch.manual_seed(1234)  # identical on every process, whatever the job's seed
        tiny = LlamaConfig(
            vocab_size=256,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=512,
            tie_word_embeddings=True,
        )
        model = LlamaForCausalLM(tiny)
    elif Path(config.base_model).is_dir():
        model = AutoModelForCausalLM.from_pretrained(config.base_model, dtype=torch.float32, local_files_only=True)
    else:
        from evolvable.model_loading import load_base_model

        model, _ = load_base_model(config.base_model)
    model.config.use_cache = False
    return model


def _with_adapter(model: PreTrainedModel, config: RLConfig) -> torch.nn.Module:
    from peft import LoraConfig, PeftModel, get_peft_model

    if config.init_adapter:
        return PeftModel.from_pretrained(model, config.init_adapter, is_trainable=True)
    layers = None
    if config.lora_top_layers:
        total = int(model.config.num_hidden_layers)
        if config.lora_top_layers > total:
            raise TrainingError(f"lora_top_layers={config.lora_top_layers} but the model has {total} layers")
        layers = list(range(total - config.lora_top_layers, total))
    lora = LoraConfig(
        r=config.lora_r,
        lora_alpha=config.lora_alpha,
        lora_dropout=config.lora_dropout,
        target_modules=list(config.lora_targets),
        layers_to_transform=layers,
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, lora)


# ----------------------------------------------------------------------------- batches


def _collate(samples: list[TrainingSample], device: torch.device) -> dict[str, torch.Tensor]:
    """Right-pad a micro-batch. Padding has attention 0 and loss mask 0, so it contributes nothing."""
    import torch

    width = max(len(s.input_ids) for s in samples)

    def pad(rows: list[list[Any]], value: float, dtype: torch.dtype) -> torch.Tensor:
        return torch.tensor([r + [value] * (width - len(r)) for r in rows], dtype=dtype, device=device)

    return {
        "input_ids": pad([s.input_ids for s in samples], 0, torch.long),
        "attention_mask": pad([[1] * len(s.input_ids) for s in samples], 0, torch.long),
        "loss_mask": pad([s.loss_mask for s in samples], 0, torch.float32),
        "behaviour_logprobs": pad([s.behaviour_logprobs for s in samples], 0.0, torch.float32),
        "advantages": pad([s.advantages for s in samples], 0.0, torch.float32),
        "token_weights": pad([[s.weight] * len(s.input_ids) for s in samples], 0.0, torch.float32),
    }


def _padding_sample(like: TrainingSample) -> TrainingSample:
    """A sequence that keeps every process stepping in lockstep but has no loss (mask all 0).

    One token long: a micro-batch of padding alone costs a one-token forward pass (it scores nothing),
    and one that shares a micro-batch with real sequences adds no width."""
    n = 1
    return TrainingSample(
        sample_id="padding",
        trajectory_id="padding",
        input_ids=list(like.input_ids[:n]),
        loss_mask=[0] * n,
        behaviour_logprobs=[0.0] * n,
        advantages=[0.0] * n,
        weight=0.0,
    )


def _iteration_plan(n_samples: int, config: RLConfig, world: int) -> list[list[int]]:
    """Sample indices per PPO iteration over all epochs, in a seeded order every process agrees on."""
    plan: list[list[int]] = []
    for epoch in range(config.epochs):
        order = list(range(n_samples))
        random.Random(config.seed * 1_000_003 + epoch).shuffle(order)
        plan += [order[i : i + config.rollout_batch_size] for i in range(0, n_samples, config.rollout_batch_size)]
    return plan


def _rank_share(
    indices: list[int], samples: list[TrainingSample], config: RLConfig, rank: int, world: int
) -> list[TrainingSample]:
    """This process's sequences of one iteration, padded to whole optimizer steps on every process."""
    per_step = config.micro_batch_size * config.grad_accum_steps
    per_rank = math.ceil(len(indices) / world)
    per_rank = math.ceil(per_rank / per_step) * per_step
    mine = [samples[i] for i in indices[rank::world]]
    # Longest-first within the share keeps micro-batches of similar length (less padding).
    mine.sort(key=lambda s: len(s.input_ids), reverse=True)
    return mine + [_padding_sample(samples[indices[0]])] * (per_rank - len(mine))


def _sequence_logprobs(
    model: torch.nn.Module,
    batch: dict[str, torch.Tensor],
    temperature: float,
    entropy_out: list[torch.Tensor] | None = None,
) -> torch.Tensor:
    """Logprobs aligned with input_ids, computed only where some row of the batch has a generated token.

    Completions are a small share of each sequence (the prompt holds the harness and history), so
    asking the model for logits at those positions only (`logits_to_keep`) skips most of the
    lm_head and log-softmax work over the 49k-token vocabulary. Other positions are left 0.
    With `entropy_out` (a list), the policy's entropy at each position (detached, same layout) is
    appended to it.
    """
    import torch

    ids = batch["input_ids"]
    targets = (batch["loss_mask"][:, 1:] > 0).any(dim=0).nonzero().squeeze(-1) + 1  # positions to score
    if targets.numel() == 0:
        empty = torch.zeros(ids.shape, dtype=torch.float32, device=ids.device)
        if entropy_out is not None:
            entropy_out.append(empty.clone())
        return empty
    logits = model(input_ids=ids, attention_mask=batch["attention_mask"], logits_to_keep=targets - 1).logits
    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    log_norm = torch.logsumexp(logits, dim=-1)
    picked = torch.gather(logits, -1, ids[:, targets].unsqueeze(-1)).squeeze(-1) - log_norm
    out = torch.zeros(ids.shape, dtype=picked.dtype, device=ids.device)
    if entropy_out is not None:
        with torch.no_grad():
            detached = logits.detach()
            entropy = log_norm.detach() - (torch.softmax(detached, dim=-1) * detached).sum(-1)
            entropy_out.append(torch.zeros_like(out).index_copy(1, targets, entropy))
    return out.index_copy(1, targets, picked)


def forking_token_weights(entropy: torch.Tensor, loss_mask: torch.Tensor, fraction: float) -> torch.Tensor:
    """1 on the `fraction` of generated tokens with the highest policy entropy, 0 elsewhere.

    Most tokens of a tool call are forced once the call is chosen ("order_id" after
    `"issue_refund", "args": {"`); the choices are made at a few high-entropy tokens. Training only
    on those (Wang et al. 2025, "Beyond the 80/20 rule") keeps a batch's negative advantages from
    pushing down the forced tokens that correct calls share. Ties at the threshold are all kept.
    """
    import torch

    active = loss_mask > 0
    if fraction >= 1.0 or not bool(active.any()):
        return active.to(entropy.dtype)
    values = entropy[active]
    keep = max(1, math.ceil(fraction * values.numel()))
    threshold = torch.topk(values, keep).values.min()
    return (active & (entropy >= threshold)).to(entropy.dtype)


# ----------------------------------------------------------------------------- the loop


def train_on_samples(
    samples: list[TrainingSample],
    config: RLConfig,
    *,
    job_state: JobState,
    accelerator: Accelerator,
    resume_dir: Path | None = None,
) -> tuple[Any, dict[str, float]]:
    """Train a LoRA adapter on prepared samples; returns (prepared model, summary metrics)."""
    from accelerate.utils import set_seed

    set_seed(config.seed)
    out = Path(config.output_dir)
    model, optimizer, trainable = _prepare_training(config, accelerator, job_state, resume_dir)
    rank, world = accelerator.process_index, accelerator.num_processes
    plan = _iteration_plan(len(samples), config, world)
    steps_per_iteration = [
        config.ppo_epochs * len(_rank_share(ix, samples, config, rank, world)) // config.micro_batch_size for ix in plan
    ]
    metrics_path = out / "metrics.jsonl"
    totals: dict[str, float] = {"tokens": 0.0, "seconds": 0.0, "loss": 0.0, "clip_fraction": 0.0, "approx_kl": 0.0}
    totals["steps"] = 0.0
    started = time.perf_counter()
    seen: set[str] = set()

    progress, task = _progress(accelerator, config, total=sum(steps_per_iteration))
    if progress is not None and task is not None:
        progress.update(task, completed=sum(steps_per_iteration[: job_state.iteration]))

    def advance() -> None:
        if progress is not None and task is not None:
            progress.advance(task)

    with progress or nullcontext():
        for iteration in range(job_state.iteration, len(plan)):
            iteration_start = time.perf_counter()
            share = _rank_share(plan[iteration], samples, config, rank, world)
            seen.update(s.sample_id for s in share)
            micro = [
                _collate(share[i : i + config.micro_batch_size], accelerator.device)
                for i in range(0, len(share), config.micro_batch_size)
            ]
            # Before the first update the policy is the one that sampled on-policy data: the recorded
            # behaviour logprobs are the proximal ones, when the job says its data is on-policy.
            _fill_proximal_logprobs(
                model, accelerator, micro, config, config.proximal_from_behaviour and iteration == 0
            )
            model.train()
            # PPO epochs over the iteration's sequences, grad_accum micro-batches per optimizer step.
            for _ in range(config.ppo_epochs):
                for first in range(0, len(micro), config.grad_accum_steps):
                    group = micro[first : first + config.grad_accum_steps]
                    terms = _optimizer_step(model, optimizer, trainable, accelerator, group, config, advance)
                    record = _account_step(accelerator, model, job_state, terms, config, iteration, started)
                    totals["steps"] += 1
                    for key in ("loss", "clip_fraction", "approx_kl"):
                        totals[key] += record[key]
                    totals["tokens"] += record["tokens"]
                    if accelerator.is_main_process:
                        observe_training_step(record)
                        with metrics_path.open("a") as handle:
                            handle.write(json.dumps(record) + "\n")
            job_state.iteration = iteration + 1
            totals["seconds"] += time.perf_counter() - iteration_start
            interval = config.checkpoint_interval
            if interval > 0 and job_state.iteration % interval == 0 and job_state.iteration < len(plan):
                _checkpoint(accelerator, out, job_state.iteration, config.keep_checkpoints)

    steps = max(totals["steps"], 1.0)
    summary = {
        "optimizer_steps": float(job_state.optimizer_steps),
        "loss_mean": totals["loss"] / steps,
        "clip_fraction_mean": totals["clip_fraction"] / steps,
        "approx_kl_mean": totals["approx_kl"] / steps,
        "train_tokens": totals["tokens"],
        "train_seconds": totals["seconds"],
        "tokens_per_s": totals["tokens"] / totals["seconds"] if totals["seconds"] > 0 else 0.0,
    }
    _write_rank_report(out, accelerator, model, sorted(seen - {"padding"}))
    return model, summary


def _prepare_training(
    config: RLConfig, accelerator: Accelerator, job_state: JobState, resume_dir: Path | None
) -> tuple[Any, Any, list[Any]]:
    """(model with a fresh or resumed adapter, optimizer, trainable parameters), prepared by `accelerator`;
    checkpoints hold the adapter and the job state, not a copy of the frozen base model."""
    import torch

    model = _with_adapter(load_policy_model(config), config)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=config.lr, weight_decay=config.weight_decay)
    model, optimizer = accelerator.prepare(model, optimizer)
    trainable_names = {name for name, p in model.named_parameters() if p.requires_grad}

    def keep_only_adapter(models: list[Any], weights: list[dict[str, Any]], _dir: str) -> None:
        for i, state in enumerate(weights):
            weights[i] = {k: v for k, v in state.items() if k in trainable_names}

    accelerator.register_save_state_pre_hook(keep_only_adapter)
    accelerator.register_for_checkpointing(job_state)
    if resume_dir is not None:
        accelerator.load_state(str(resume_dir), strict=False)
    return model, optimizer, trainable


def _fill_proximal_logprobs(
    model: Any, accelerator: Accelerator, micro: list[dict[str, torch.Tensor]], config: RLConfig, on_policy: bool
) -> None:
    """Proximal (and reference) logprobs under the policy as it is now, without gradient."""
    import torch

    model.eval()
    with torch.no_grad():
        for batch in micro:
            if on_policy:
                batch["proximal_logprobs"] = batch["behaviour_logprobs"]
            else:
                batch["proximal_logprobs"] = _sequence_logprobs(model, batch, config.temperature)
            if config.kl_coef > 0:
                with accelerator.unwrap_model(model).disable_adapter():
                    batch["ref_logprobs"] = _sequence_logprobs(model, batch, config.temperature)


def _optimizer_step(
    model: Any,
    optimizer: Any,
    trainable: list[Any],
    accelerator: Accelerator,
    group: list[dict[str, torch.Tensor]],
    config: RLConfig,
    advance: Callable[[], None],
) -> dict[str, Any]:
    """One optimizer step over `group`'s micro-batches; the step's loss terms, per generated token over
    every rank, and its token counts."""
    import torch

    local = torch.tensor(
        [sum(float(b["loss_mask"].sum()) for b in group), sum(float(b["attention_mask"].sum()) for b in group)],
        device=accelerator.device,
        dtype=torch.float64,
    )
    generated_tokens, sequence_tokens = accelerator.reduce(local, reduction="sum").tolist()
    # DDP averages gradients over processes and accelerate divides by grad_accum_steps;
    # this normaliser undoes both so the step's loss is a mean over its generated tokens.
    normaliser = max(generated_tokens, 1.0) / (accelerator.num_processes * config.grad_accum_steps)
    sums = torch.zeros(7, device=accelerator.device, dtype=torch.float64)
    for batch in group:
        sums += _micro_batch_backward(model, optimizer, trainable, accelerator, batch, config, normaliser)
        advance()
    sums = accelerator.reduce(sums, reduction="sum")
    n = max(generated_tokens, 1.0)
    return {
        "loss": float(sums[0]) / n,
        "policy_loss": float(sums[1]) / n,
        "kl_ref": float(sums[2]) / n,
        "clip_fraction": float(sums[3]) / n,
        "approx_kl": float(sums[4]) / n,
        "behaviour_weight": float(sums[5]) / n,
        "capped_fraction": float(sums[6]) / n,
        "generated_tokens": int(generated_tokens),
        "tokens": int(sequence_tokens),
    }


def _micro_batch_backward(
    model: Any,
    optimizer: Any,
    trainable: list[Any],
    accelerator: Accelerator,
    batch: dict[str, torch.Tensor],
    config: RLConfig,
    normaliser: float,
) -> torch.Tensor:
    """Loss and backward for one micro-batch (the optimizer steps when accelerate syncs); returns its
    loss terms as sums: loss, policy loss, KL to the reference, clipped, approx KL, behaviour weight, capped."""
    import torch

    from evolvable.trainer.loss import decoupled_ppo_loss

    with accelerator.accumulate(model):
        entropy: list[torch.Tensor] = []
        forking = config.forking_token_fraction < 1.0
        logprobs = _sequence_logprobs(model, batch, config.temperature, entropy if forking else None)
        token_weights = batch["token_weights"]
        if forking:
            selected = forking_token_weights(entropy[0], batch["loss_mask"], config.forking_token_fraction)
            token_weights = token_weights * selected
        result = decoupled_ppo_loss(
            logprobs,
            batch["proximal_logprobs"],
            batch["behaviour_logprobs"],
            batch["advantages"],
            batch["loss_mask"],
            clip_eps=config.clip_eps,
            clip_eps_high=config.clip_eps_high,
            behaviour_cap=config.behaviour_cap,
            ref_logprobs=batch.get("ref_logprobs"),
            kl_coef=config.kl_coef,
            token_weights=token_weights,
            normaliser=normaliser,
        )
        loss = result.loss
        if not loss.requires_grad:
            # No generated token in this micro-batch (padding alone). It still runs the model forward:
            # under DDP the forward is what enrols a process in the step's gradient all-reduce, and a
            # backward without one joins none, leaving the other processes waiting for ever. The zero
            # loss touches every trainable weight, so backward has a graph reaching all of them.
            logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], logits_to_keep=1)
            loss = loss + logits.logits.sum() * 0.0 + sum(p.sum() for p in trainable) * 0.0
        accelerator.backward(loss)
        if accelerator.sync_gradients and config.max_grad_norm > 0:
            accelerator.clip_grad_norm_(trainable, config.max_grad_norm)
        optimizer.step()
        optimizer.zero_grad()
    return torch.tensor(
        [
            float(result.loss.detach()) * normaliser,
            result.policy_loss_sum,
            result.kl_ref_sum,
            result.clipped_tokens,
            result.approx_kl_sum,
            result.behaviour_weight_sum,
            result.capped_tokens,
        ],
        dtype=torch.float64,
        device=accelerator.device,
    )


def _account_step(
    accelerator: Accelerator,
    model: Any,
    job_state: JobState,
    terms: dict[str, Any],
    config: RLConfig,
    iteration: int,
    started: float,
) -> dict[str, Any]:
    """Count the step on the job (snapshotting the adapter every `snapshot_interval` steps); the step's
    line of metrics.jsonl."""
    job_state.optimizer_steps += 1
    every = config.snapshot_interval
    if every > 0 and job_state.optimizer_steps % every == 0:
        _save_adapter(accelerator, model, _snapshot_dir(Path(config.output_dir), job_state.optimizer_steps))
    job_state.tokens += terms["tokens"]
    elapsed = time.perf_counter() - started
    return {
        "step": job_state.optimizer_steps,
        "iteration": iteration,
        **terms,
        "tokens_per_s": job_state.tokens / elapsed if elapsed > 0 else 0.0,
        "lr": config.lr,
    }


def _write_rank_report(out: Path, accelerator: Accelerator, model: Any, sample_ids: list[str]) -> None:
    """Each process records what it trained on and a digest of its adapter weights: in a healthy
    distributed job the digests agree and the sample ids are disjoint."""
    import hashlib

    digest = hashlib.sha256()
    for name, param in sorted(accelerator.unwrap_model(model).named_parameters()):
        if param.requires_grad:
            digest.update(name.encode())
            digest.update(param.detach().float().cpu().numpy().tobytes())
    report = {
        "rank": accelerator.process_index,
        "world_size": accelerator.num_processes,
        "sample_ids": sample_ids,
        "adapter_digest": digest.hexdigest(),
    }
    (out / "ranks").mkdir(parents=True, exist_ok=True)
    (out / "ranks" / f"rank-{accelerator.process_index}.json").write_text(json.dumps(report))


def _progress(accelerator: Accelerator, config: RLConfig, total: int) -> tuple[Progress | None, TaskID | None]:
    if not (config.progress and accelerator.is_main_process):
        return None, None
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    progress = Progress(
        TextColumn("[bold]training"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("micro-batches"),
        TimeElapsedColumn(),
    )
    return progress, progress.add_task("train", total=total)


def _snapshot_dir(out: Path, step: int) -> Path:
    return out / "snapshots" / f"step_{step:05d}"


def _snapshots(out: Path) -> dict[int, str]:
    root = out / "snapshots"
    found = sorted(root.glob("step_*")) if root.is_dir() else []
    return {int(path.name.removeprefix("step_")): str(path) for path in found}


def _save_adapter(accelerator: Accelerator, model: Any, target: Path) -> None:
    state = accelerator.get_state_dict(model)  # a collective under FSDP: every process calls it
    if accelerator.is_main_process:
        accelerator.unwrap_model(model).save_pretrained(str(target), state_dict=state)
    accelerator.wait_for_everyone()


def _checkpoint(accelerator: Accelerator, out: Path, iteration: int, keep: int) -> None:
    target = out / "checkpoints" / f"iter_{iteration:06d}"
    accelerator.save_state(str(target))
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        (target / "COMPLETE").write_text("ok\n")  # a crash mid-save leaves no marker: never resumed from
        for old in completed_checkpoints(out)[:-keep] if keep > 0 else []:
            shutil.rmtree(old, ignore_errors=True)
    accelerator.wait_for_everyone()


def completed_checkpoints(out: Path) -> list[Path]:
    """Checkpoints of a job directory that were written to the end, oldest first."""
    root = out / "checkpoints"
    return sorted(p for p in root.glob("iter_*") if (p / "COMPLETE").is_file()) if root.is_dir() else []


# ----------------------------------------------------------------------------- the job API


def uses_cpu(device: str) -> bool:
    """Whether a trainer process runs on the CPU. `auto` takes CUDA only when every process this machine
    launches can have a GPU of its own: two processes on one GPU fail ("invalid device ordinal")."""
    import torch

    gpus = torch.cuda.device_count()  # asks the driver (NVML) without starting CUDA in this process
    local_processes = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    if device == "cpu":
        return True
    if device == "cuda":
        if gpus == 0:
            raise TrainingError("device 'cuda' asked for, but no CUDA GPU is visible; use 'cpu' or 'auto'")
        if local_processes > gpus:
            raise TrainingError(f"{local_processes} processes on this machine but {gpus} GPU(s) visible")
        return False
    return gpus == 0 or local_processes > gpus


def _new_accelerator(config: RLConfig) -> Accelerator:
    """An Accelerator on the configured device. accelerate keeps one device per process in shared state,
    so a single process that trained on the GPU before and now wants the CPU (or back) starts it afresh."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState, PartialState

    cpu = uses_cpu(config.device)
    if cpu and config.mixed_precision == "fp16":
        raise TrainingError("mixed_precision 'fp16' needs a GPU; use 'bf16' or 'no' on the CPU")
    shared = PartialState._shared_state
    if shared and int(os.environ.get("WORLD_SIZE", "1")) == 1:
        wanted = "cpu" if cpu else "cuda"
        if shared.get("device") is not None and shared["device"].type != wanted:
            AcceleratorState._reset_state(reset_partial_state=True)
    return Accelerator(
        cpu=cpu, mixed_precision=config.mixed_precision, gradient_accumulation_steps=config.grad_accum_steps
    )


def run_training_job(
    config: RLConfig,
    samples_source: SamplesSource | None = None,
    *,
    resume: bool | str = False,
    baselines: dict[str, Any] | None = None,
    accelerator: Accelerator | None = None,
) -> TrainingResult:
    """Build the training set from `samples_source`, train, save the adapter; the control plane calls this.

    `resume=True` (or a job directory) continues from the latest checkpoint of that job directory,
    re-using its frozen training set (`samples.jsonl`), so a resumed job trains on exactly the same
    data with the same advantages. `baselines` seeds the per-cluster reward baselines (e.g. the
    previous job's `TrainingResult.baselines`).
    """
    if isinstance(resume, str):
        config.output_dir = resume
    out = Path(config.output_dir)
    accelerator = accelerator or _new_accelerator(config)
    accelerator.gradient_accumulation_steps = config.grad_accum_steps
    samples_file, stats_file = out / "samples.jsonl", out / "samples_stats.json"
    running = RunningBaselines(rate=config.baseline_ema)
    if baselines:
        running.load_state_dict(baselines)
    checkpoint = completed_checkpoints(out)[-1] if resume and completed_checkpoints(out) else None
    if resume and not samples_file.is_file():
        raise TrainingError(f"cannot resume: {samples_file} does not exist (was the job started there?)")

    if not resume:
        if samples_source is None:
            raise TrainingError("a training job needs a samples source (store filter, file or dataset)")
        if samples_file.exists() or completed_checkpoints(out):
            raise TrainingError(f"{out} already holds a job; resume it or choose another output_dir")
        accelerator.wait_for_everyone()  # every process checked before the main one writes
        if accelerator.is_main_process:
            out.mkdir(parents=True, exist_ok=True)
            samples, stats = build_training_set(iter_trajectories(samples_source), config, running)
            write_samples_jsonl(samples, samples_file)
            stats_file.write_text(
                json.dumps(
                    {
                        "stats": stats.to_dict(),
                        "baselines": running.state_dict(),
                        "data": describe_source(samples_source),
                    }
                )
            )
            (out / "config.json").write_text(json.dumps(config.to_dict(), indent=2))
        accelerator.wait_for_everyone()
    saved = json.loads(stats_file.read_text())
    running.load_state_dict(saved["baselines"])
    samples = read_samples_jsonl(samples_file)
    stats = SampleStats(**{k: v for k, v in saved["stats"].items() if k in SampleStats.__dataclass_fields__})
    if stats.reward_mean is not None:
        TRAINER_REWARD.set(stats.reward_mean)
    job_state = JobState(running)
    if not samples:
        return TrainingResult(
            output_dir=str(out),
            adapter_dir=None,
            optimizer_steps=0,
            iterations=0,
            sample_stats=saved["stats"],
            metrics={},
            baselines=running.state_dict(),
            data=saved.get("data", {}),
            config=config.to_dict(),
        )
    model, summary = train_on_samples(
        samples, config, job_state=job_state, accelerator=accelerator, resume_dir=checkpoint
    )
    adapter_dir = out / "adapter"
    _save_adapter(accelerator, model, adapter_dir)
    if accelerator.is_main_process:
        (out / "job_state.json").write_text(json.dumps(job_state.state_dict()))
    accelerator.wait_for_everyone()
    return TrainingResult(
        output_dir=str(out),
        adapter_dir=str(adapter_dir) if accelerator.is_main_process else None,
        optimizer_steps=job_state.optimizer_steps,
        iterations=job_state.iteration,
        sample_stats=stats.to_dict(),
        metrics=summary,
        baselines=running.state_dict(),
        data=saved.get("data", {}),
        config=config.to_dict(),
        resumed_from=str(checkpoint) if checkpoint else None,
        snapshots=_snapshots(out) if accelerator.is_main_process else {},
    )


def main(argv: list[str] | None = None) -> None:
    """Entry point for `accelerate launch` / `torchrun` / a scheduler: a config file and a source.

    The main process leaves a marker in the output directory when the job ends, so whoever launched
    it (possibly on another machine, or a restarted `serve`) learns the outcome from files alone:
    `result.json` (the TrainingResult) on success, `error.json` on failure."""
    parser = argparse.ArgumentParser(description="Evolvable RL trainer (decoupled PPO, LoRA).")
    parser.add_argument("--config", help="YAML, JSON or TOML RLConfig file")
    parser.add_argument("--from-file", help="ATDP trajectories JSONL")
    parser.add_argument("--db", help="store URL; trains on its trajectories (all, or --agent)")
    parser.add_argument("--agent", help="only this agent's trajectories (with --db)")
    parser.add_argument("--output-dir", help="override output_dir")
    parser.add_argument("--resume", action="store_true", help="continue the job in output_dir")
    args = parser.parse_args(argv)
    overrides = {"output_dir": args.output_dir} if args.output_dir else {}
    config = RLConfig.from_file(args.config, **overrides) if args.config else RLConfig(**overrides)
    from evolvable.trainer.samples import FileSource, StoreSource

    source: SamplesSource | None = None
    if args.from_file:
        source = FileSource(args.from_file)
    elif args.db:
        source = StoreSource(args.db, {"agent": args.agent} if args.agent else None)
    out = Path(config.output_dir)
    if uses_cpu(config.device):
        # Before anything starts CUDA: a CPU process must not see GPUs at all, or libraries that look
        # for one (accelerate's barrier) pick a GPU ordinal per process that may not exist.
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    try:
        result = run_training_job(config, source, resume=args.resume)
    except BaseException as err:
        if _is_main_process():
            out.mkdir(parents=True, exist_ok=True)
            _write_marker(out / ERROR_MARKER, {"error": f"{type(err).__name__}: {err}"})
        raise
    if _is_main_process():
        _write_marker(out / RESULT_MARKER, asdict(result))
        print(json.dumps({"adapter_dir": result.adapter_dir, "metrics": result.metrics}))


RESULT_MARKER = "result.json"
ERROR_MARKER = "error.json"


def _write_marker(path: Path, payload: dict[str, Any]) -> None:
    """Whole or not at all: whoever polls for the marker never reads half of it."""
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(payload, default=str))
    os.replace(partial, path)


def _is_main_process() -> bool:
    """Rank 0 of a distributed launch (RANK is set by torchrun and accelerate), or a plain process."""
    return os.environ.get("RANK", "0") == "0"


if __name__ == "__main__":
    main()
