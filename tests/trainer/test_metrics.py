"""A training job's Prometheus series: served over HTTP while the job's process runs, moved by each step."""

from __future__ import annotations

import socket
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from evolvable.protocol.models import Trajectory
from evolvable.telemetry.metrics import serve_trainer_metrics
from evolvable.trainer.config import RLConfig
from evolvable.trainer.loop import run_training_job

TINY = {"base_model": "tiny-random-llama", "lora_r": 4, "lora_alpha": 8, "lora_targets": ["q_proj"], "progress": False}


def scrape(port: int) -> dict[str, float]:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples if not s.labels}


def test_a_training_job_serves_loss_reward_kl_and_throughput(tmp_path: Path, synthetic_set: list[Trajectory]) -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    server = serve_trainer_metrics(port)
    try:
        before = scrape(port)
        config = RLConfig.from_dict({**TINY, "output_dir": str(tmp_path / "job"), "rollout_batch_size": 8})
        result = run_training_job(config, synthetic_set)
        after = scrape(port)
    finally:
        server.shutdown()
    steps = after["evolvable_trainer_optimizer_steps_total"] - before["evolvable_trainer_optimizer_steps_total"]
    assert steps == result.optimizer_steps > 0
    assert after["evolvable_trainer_tokens_total"] > before["evolvable_trainer_tokens_total"]
    assert after["evolvable_trainer_tokens_per_second"] > 0
    assert after["evolvable_trainer_loss"] != 0.0
    assert after["evolvable_trainer_reward_mean"] == result.sample_stats["reward_mean"]
    assert "evolvable_trainer_kl" in after
