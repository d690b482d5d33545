"""The training loop on a tiny random Llama: learns in the right direction, resumes exactly, runs as 2 processes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from evolvable.errors import TrainingError
from evolvable.protocol.models import Trajectory
from evolvable.trainer.config import RLConfig
from evolvable.trainer.loop import run_training_job

TINY = {
    "base_model": "tiny-random-llama",
    "lora_r": 4,
    "lora_alpha": 8,
    "lora_targets": ["q_proj", "v_proj", "up_proj"],
    "progress": False,
}


def tiny_config(out: Path, **kw) -> RLConfig:
    return RLConfig.from_dict({**TINY, "output_dir": str(out), **kw})


def tiny_model_and_batch(seed: int, length: int, spans: list[tuple[int, int]]):
    """The tiny model with a fresh adapter, random ids [len(spans), length], loss mask 1 on each row's span."""
    from evolvable.trainer.loop import _with_adapter, load_policy_model

    config = RLConfig.from_dict(TINY)
    model = _with_adapter(load_policy_model(config), config)
    ids = torch.randint(1, 256, (len(spans), length), generator=torch.Generator().manual_seed(seed))
    mask = torch.zeros(len(spans), length)
    for row, (start, end) in enumerate(spans):
        mask[row, start:end] = 1
    return model, ids, mask


def adapter_weights(adapter_dir: str | Path) -> dict[str, torch.Tensor]:
    return load_file(str(Path(adapter_dir) / "adapter_model.safetensors"))


def test_job_writes_adapter_metrics_and_lineage(tmp_path: Path, synthetic_set: list[Trajectory]) -> None:
    config = tiny_config(tmp_path / "job", rollout_batch_size=8, micro_batch_size=2, grad_accum_steps=2)
    result = run_training_job(config, synthetic_set)
    assert result.adapter_dir and (Path(result.adapter_dir) / "adapter_config.json").is_file()
    assert result.optimizer_steps == 4 and result.iterations == 2
    lines = [json.loads(line) for line in (tmp_path / "job" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in lines] == [1, 2, 3, 4]
    for key in ("loss", "clip_fraction", "approx_kl", "tokens_per_s", "behaviour_weight"):
        assert all(isinstance(r[key], float) for r in lines)
    assert result.metrics["tokens_per_s"] > 0
    assert result.sample_stats["samples"] > 0 and set(result.baselines["means"]) == {"a", "b"}
    with pytest.raises(TrainingError, match="already holds a job"):
        run_training_job(config, synthetic_set)


def test_training_moves_probability_toward_positive_advantage(tmp_path: Path, trajectory_factory) -> None:
    """Token 10 always succeeds, token 20 always fails, after the same prompt: p(10) must rise."""
    good = [trajectory_factory(completion=[10], outcome=1.0, cluster="x") for _ in range(8)]
    bad = [trajectory_factory(completion=[20], outcome=0.0, cluster="x") for _ in range(8)]
    for t in good + bad:  # one shared prompt so the comparison is clean
        t.steps[0].prompt_token_ids = [5, 6, 7]
    config = tiny_config(
        tmp_path / "job", lr=5e-2, epochs=4, rollout_batch_size=16, micro_batch_size=4, grad_accum_steps=2
    )
    result = run_training_job(config, good + bad)

    from peft import PeftModel

    from evolvable.trainer.loop import load_policy_model

    def p_good_minus_bad(model) -> float:
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([[5, 6, 7]])).logits[0, -1].log_softmax(-1)
        return float(logits[10] - logits[20])

    before = p_good_minus_bad(load_policy_model(config))
    after = p_good_minus_bad(PeftModel.from_pretrained(load_policy_model(config), result.adapter_dir))
    assert after > before + 0.5


def test_resume_reproduces_the_uninterrupted_run(tmp_path: Path, synthetic_set: list[Trajectory]) -> None:
    settings = dict(rollout_batch_size=4, micro_batch_size=2, grad_accum_steps=1, checkpoint_interval=1, lr=1e-2)
    full = run_training_job(tiny_config(tmp_path / "full", **settings), synthetic_set)
    checkpoints = sorted((tmp_path / "full" / "checkpoints").iterdir())
    assert [p.name for p in checkpoints] == ["iter_000002", "iter_000003"]  # keep_checkpoints=2, none at the end
    # Simulate a crash after iteration 2: copy the job as it was then and resume it.
    crashed = tmp_path / "crashed"
    crashed.mkdir()
    for name in ("samples.jsonl", "samples_stats.json", "config.json"):
        shutil.copy(tmp_path / "full" / name, crashed / name)
    shutil.copytree(checkpoints[0], crashed / "checkpoints" / checkpoints[0].name)
    resumed = run_training_job(tiny_config(crashed, **settings), resume=True)
    assert resumed.resumed_from and resumed.resumed_from.endswith("iter_000002")
    assert resumed.optimizer_steps == full.optimizer_steps == 8
    assert resumed.baselines == full.baselines
    a, b = adapter_weights(full.adapter_dir), adapter_weights(resumed.adapter_dir)
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key])
    # a fresh adapter would differ: the comparison can fail
    assert any(not torch.equal(a[k], torch.zeros_like(a[k])) for k in a if "lora_B" in k)


def test_resume_without_a_job_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(TrainingError, match="cannot resume"):
        run_training_job(tiny_config(tmp_path / "none"), resume=True)


def test_no_usable_samples_trains_nothing(tmp_path: Path, trajectory_factory) -> None:
    result = run_training_job(tiny_config(tmp_path / "job"), [trajectory_factory(status="running")])
    assert result.adapter_dir is None and result.sample_stats["excluded"] == {"running": 1}


def _torchrun(args: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """torchrun with its output in files; a job that hangs is stopped whole: SIGTERM makes torchrun stop the
    worker processes it started (each in a session of its own), SIGKILL follows if it does not."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", *args]
    out, err = cwd / "torchrun.out", cwd / "torchrun.err"
    with out.open("w") as stdout, err.open("w") as stderr:
        job = subprocess.Popen(command, cwd=cwd, env=env, stdout=stdout, stderr=stderr, start_new_session=True)
        try:
            job.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            job.terminate()
            try:
                job.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(job.pid, signal.SIGKILL)
                job.wait()
            pytest.fail(f"torchrun {' '.join(args)} did not finish in {timeout} s (a hung collective?)")
    return subprocess.CompletedProcess(command, job.returncode, out.read_text(), err.read_text())


def test_two_cpu_processes_with_torchrun(tmp_path: Path, synthetic_set: list[Trajectory]) -> None:
    data = tmp_path / "trajectories.jsonl"
    data.write_text("".join(t.model_dump_json() + "\n" for t in synthetic_set[:8]))
    # One optimizer step per iteration holding all 4 sequences: 2 processes x 1 micro-batch of 2 sequences,
    # or 1 process x 2 accumulated micro-batches, must give the same update.
    two = {**TINY, "rollout_batch_size": 4, "micro_batch_size": 2, "grad_accum_steps": 1, "lr": 1e-2}
    (tmp_path / "two.yaml").write_text(yaml.safe_dump({**two, "output_dir": str(tmp_path / "two")}))
    done = _torchrun(
        ["--nproc_per_node", "2", "-m", "evolvable.trainer.loop", "--config", "two.yaml", "--from-file", str(data)],
        tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    reports = [json.loads((tmp_path / "two" / "ranks" / f"rank-{i}.json").read_text()) for i in (0, 1)]
    assert [r["world_size"] for r in reports] == [2, 2]
    assert reports[0]["sample_ids"] and reports[1]["sample_ids"]
    assert not set(reports[0]["sample_ids"]) & set(reports[1]["sample_ids"])
    assert reports[0]["adapter_digest"] == reports[1]["adapter_digest"]
    assert done.stdout.count("adapter_dir") == 1  # saved and reported once, by the main process
    assert sorted(p.name for p in (tmp_path / "two").iterdir() if p.name.startswith("adapter")) == ["adapter"]

    one = run_training_job(
        tiny_config(tmp_path / "one", **{**two, "grad_accum_steps": 2, "micro_batch_size": 2}),
        [Trajectory.model_validate_json(line) for line in data.read_text().splitlines()],
    )
    a, b = adapter_weights(tmp_path / "two" / "adapter"), adapter_weights(one.adapter_dir)
    for key in a:
        torch.testing.assert_close(a[key], b[key], atol=1e-5, rtol=1e-4)


def test_a_rank_whose_micro_batch_is_all_padding_keeps_in_step(tmp_path: Path, synthetic_set: list[Trajectory]) -> None:
    """3 sequences on 2 processes, one per micro-batch: rank 1's second micro-batch is padding alone. It must
    still join the step's gradient all-reduce; a rank that skips it leaves the other waiting for ever."""
    data = tmp_path / "trajectories.jsonl"
    data.write_text("".join(t.model_dump_json() + "\n" for t in synthetic_set[0:6:2]))
    odd = {**TINY, "rollout_batch_size": 4, "micro_batch_size": 1, "grad_accum_steps": 1, "lr": 1e-2}
    (tmp_path / "odd.yaml").write_text(yaml.safe_dump({**odd, "output_dir": str(tmp_path / "odd")}))
    done = _torchrun(
        ["--nproc_per_node", "2", "-m", "evolvable.trainer.loop", "--config", "odd.yaml", "--from-file", str(data)],
        tmp_path,
        timeout=150,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    reports = [json.loads((tmp_path / "odd" / "ranks" / f"rank-{i}.json").read_text()) for i in (0, 1)]
    assert [len(r["sample_ids"]) for r in reports] == [2, 1]
    assert reports[0]["adapter_digest"] == reports[1]["adapter_digest"]  # the padding rank applied the same steps
    steps = [json.loads(line)["step"] for line in (tmp_path / "odd" / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2]


def test_logits_only_where_needed_match_the_full_forward() -> None:
    from evolvable.trainer.loop import _sequence_logprobs
    from evolvable.trainer.loss import token_logprobs

    model, ids, mask = tiny_model_and_batch(seed=0, length=10, spans=[(6, 9), (3, 5)])
    attention = torch.ones(2, 10, dtype=torch.long)
    attention[1, 8:] = 0
    with torch.no_grad():
        full = token_logprobs(model(input_ids=ids, attention_mask=attention).logits, ids)
        part = _sequence_logprobs(model, {"input_ids": ids, "attention_mask": attention, "loss_mask": mask}, 1.0)
    torch.testing.assert_close(full * mask, part * mask, atol=1e-5, rtol=1e-5)
    assert bool((part * mask != 0).any())


def test_trainer_package_exports() -> None:
    import evolvable.trainer as trainer

    assert all(hasattr(trainer, name) for name in trainer.__all__)


def _on_policy(samples: list, config: RLConfig) -> list:
    """The samples with behaviour logprobs replaced by the fresh adapter's own (as if it had sampled them)."""
    from evolvable.trainer.loop import _collate, _sequence_logprobs, _with_adapter, load_policy_model

    model = _with_adapter(load_policy_model(config), config)
    for sample in samples:
        batch = _collate([sample], torch.device("cpu"))
        with torch.no_grad():
            logprobs = _sequence_logprobs(model, batch, 1.0)[0]
        sample.behaviour_logprobs = [float(x) * m for x, m in zip(logprobs, sample.loss_mask, strict=True)]
    return samples


def _train(samples: list, config: RLConfig) -> dict[str, torch.Tensor]:
    from accelerate import Accelerator

    from evolvable.trainer.advantages import RunningBaselines
    from evolvable.trainer.loop import JobState, train_on_samples

    Path(config.output_dir).mkdir(parents=True)
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=config.grad_accum_steps)
    model, _ = train_on_samples(samples, config, job_state=JobState(RunningBaselines()), accelerator=accelerator)
    return {k: v.detach().clone() for k, v in model.named_parameters() if v.requires_grad}


def test_proximal_from_behaviour_is_exact_on_policy_only(tmp_path: Path, synthetic_set: list[Trajectory]) -> None:
    from evolvable.trainer.advantages import RunningBaselines
    from evolvable.trainer.samples import build_training_set

    settings = dict(rollout_batch_size=64, micro_batch_size=2, grad_accum_steps=2, lr=1e-2, ppo_epochs=2)
    samples, _ = build_training_set(synthetic_set, tiny_config(tmp_path / "x", **settings), RunningBaselines())
    fresh = _on_policy(samples, tiny_config(tmp_path / "x", **settings))
    recomputed = _train(fresh, tiny_config(tmp_path / "a", **settings))
    reused = _train(fresh, tiny_config(tmp_path / "b", proximal_from_behaviour=True, **settings))
    for key in recomputed:
        torch.testing.assert_close(recomputed[key], reused[key], atol=1e-5, rtol=1e-4)
    # Off-policy data (the fixture's constant -2.0 logprobs): reusing them as proximal changes the update.
    stale, _ = build_training_set(synthetic_set, tiny_config(tmp_path / "y", **settings), RunningBaselines())
    off = _train(stale, tiny_config(tmp_path / "c", proximal_from_behaviour=True, **settings))
    assert any(not torch.allclose(recomputed[k], off[k], atol=1e-4) for k in recomputed)


def test_lora_top_layers_adapts_only_the_top_layers(tmp_path: Path, synthetic_set: list[Trajectory]) -> None:
    result = run_training_job(tiny_config(tmp_path / "job", lora_top_layers=1), synthetic_set)
    keys = adapter_weights(result.adapter_dir).keys()
    assert keys and all(".layers.1." in k for k in keys)  # the tiny model has layers 0 and 1
    with pytest.raises(TrainingError, match="has 2 layers"):
        run_training_job(tiny_config(tmp_path / "bad", lora_top_layers=3), synthetic_set)
    with pytest.raises(TrainingError, match="lora_top_layers"):
        tiny_config(tmp_path / "neg", lora_top_layers=-1)


def test_padding_sequences_are_one_token_and_change_nothing(tmp_path: Path, synthetic_set: list[Trajectory]) -> None:
    from evolvable.trainer.advantages import RunningBaselines
    from evolvable.trainer.loop import _rank_share
    from evolvable.trainer.samples import build_training_set

    # 5 sequences, one optimizer step of 4 micro-batches of 2: three padding sequences.
    config = tiny_config(tmp_path / "x", rollout_batch_size=64, micro_batch_size=2, grad_accum_steps=4, lr=1e-2)
    samples, _ = build_training_set(synthetic_set, config, RunningBaselines())
    samples = samples[:5]
    share = _rank_share(list(range(5)), samples, config, 0, 1)
    padding = [s for s in share if s.sample_id == "padding"]
    assert len(share) == 8 and len(padding) == 3 and all(len(s.input_ids) == 1 for s in padding)
    padded = _train(samples, config)
    # The same single step as 5 micro-batches of one sequence, no padding: the same update.
    plain = _train(
        samples, tiny_config(tmp_path / "p", rollout_batch_size=64, micro_batch_size=1, grad_accum_steps=5, lr=1e-2)
    )
    for key in padded:
        torch.testing.assert_close(padded[key], plain[key], atol=1e-5, rtol=1e-4)
    assert any(not torch.equal(v, torch.zeros_like(v)) for k, v in padded.items() if "lora_B" in k)


def test_entropy_matches_the_full_softmax_and_forking_tokens_are_the_uncertain_ones() -> None:
    from evolvable.trainer.loop import _sequence_logprobs, forking_token_weights

    model, ids, mask = tiny_model_and_batch(seed=1, length=8, spans=[(4, 8), (2, 5)])
    batch = {"input_ids": ids, "attention_mask": torch.ones(2, 8, dtype=torch.long), "loss_mask": mask}
    entropy: list[torch.Tensor] = []
    with torch.no_grad():
        _sequence_logprobs(model, batch, 0.7, entropy)
        logits = model(input_ids=ids).logits[:, :-1].float() / 0.7
    full = torch.nn.functional.pad(torch.distributions.Categorical(logits=logits).entropy(), (1, 0))
    torch.testing.assert_close(entropy[0] * mask, full * mask, atol=1e-4, rtol=1e-4)
    nothing: list[torch.Tensor] = []  # a micro-batch of padding: no position to score, zeros
    _sequence_logprobs(model, {**batch, "loss_mask": torch.zeros(2, 8)}, 0.7, nothing)
    assert len(nothing) == 1 and float(nothing[0].abs().sum()) == 0.0

    # Hand case: 5 generated tokens, keep the top 40% (2 of 5); prompt positions never count.
    hand = torch.tensor([[9.0, 0.1, 2.0, 0.3, 1.5, 0.2]])
    gen = torch.tensor([[0.0, 1.0, 1.0, 1.0, 1.0, 1.0]])
    assert forking_token_weights(hand, gen, 0.4).tolist() == [[0.0, 0.0, 1.0, 0.0, 1.0, 0.0]]
    assert forking_token_weights(hand, gen, 1.0).tolist() == gen.tolist()
    assert forking_token_weights(hand, torch.zeros_like(gen), 0.4).sum() == 0


def test_forking_token_fraction_trains_and_is_validated(tmp_path: Path, synthetic_set: list[Trajectory]) -> None:
    config = tiny_config(tmp_path / "job", forking_token_fraction=0.2, rollout_batch_size=8, micro_batch_size=2)
    result = run_training_job(config, synthetic_set)
    assert result.adapter_dir and result.optimizer_steps > 0
    with pytest.raises(TrainingError, match="forking_token_fraction"):
        tiny_config(tmp_path / "bad", forking_token_fraction=0.0)


def test_snapshots_hold_the_adapter_every_interval(tmp_path: Path, synthetic_set: list[Trajectory]) -> None:
    config = tiny_config(
        tmp_path / "job", rollout_batch_size=8, micro_batch_size=2, grad_accum_steps=2, snapshot_interval=2
    )
    result = run_training_job(config, synthetic_set)
    assert result.optimizer_steps == 4
    assert sorted(result.snapshots) == [2, 4]
    second, fourth, final = (adapter_weights(p) for p in (result.snapshots[2], result.snapshots[4], result.adapter_dir))
    key = next(k for k in final if "lora_B" in k)  # lora_B starts at zero: every step moves it
    assert not torch.equal(second[key], fourth[key])
    assert all(torch.equal(fourth[k], final[k]) for k in final)  # the last snapshot is the published adapter
    assert not run_training_job(tiny_config(tmp_path / "off", rollout_batch_size=8), synthetic_set).snapshots
    with pytest.raises(TrainingError, match="snapshot_interval"):
        tiny_config(tmp_path / "bad", snapshot_interval=-1)
