"""`evolvable train` by hand: a config file, a trajectory file, publishing; bad input is a clear error."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evolvable.cli.main import app
from evolvable.control.registry import Registry
from evolvable.errors import TrainingError
from evolvable.store import Store
from evolvable.trainer.config import RLConfig


def test_config_from_yaml_and_toml(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text("lr: 0.001\nlora_targets: [q_proj]\n")
    (tmp_path / "c.toml").write_text('[train]\nlr = 0.002\nharness_version = "h1"\n')
    assert RLConfig.from_file(tmp_path / "c.yaml").lora_targets == ["q_proj"]
    toml = RLConfig.from_file(tmp_path / "c.toml", output_dir="x")
    assert (toml.lr, toml.harness_version, toml.output_dir) == (0.002, "h1", "x")
    (tmp_path / "typo.yaml").write_text("learning_rate: 0.1\n")
    with pytest.raises(TrainingError, match="unknown training config key"):
        RLConfig.from_file(tmp_path / "typo.yaml")
    with pytest.raises(TrainingError, match="clip_eps"):
        RLConfig(clip_eps=1.5)
    with pytest.raises(TrainingError, match="negative_advantage_scale"):
        RLConfig(negative_advantage_scale=-0.1)
    assert all(RLConfig.help_text().values())


def test_train_from_file_and_publish(tmp_path: Path, synthetic_set) -> None:
    data = tmp_path / "runs.jsonl"
    data.write_text("".join(t.model_dump_json() + "\n" for t in synthetic_set[:6]))
    (tmp_path / "job.yaml").write_text(
        "base_model: tiny-random-llama\nlora_r: 2\nlora_targets: [q_proj]\nprogress: false\n"
        "rollout_batch_size: 6\nmicro_batch_size: 3\ngrad_accum_steps: 1\n"
    )
    db = f"sqlite:///{tmp_path / 'store.db'}"
    result = CliRunner().invoke(
        app,
        [
            "train",
            "--from-file",
            str(data),
            "--config",
            str(tmp_path / "job.yaml"),
            "--output-dir",
            str(tmp_path / "job"),
            "--db",
            db,
            "--publish",
            "--agent",
            "support",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "published support-rl-" in result.output
    assert (tmp_path / "job" / "adapter" / "adapter_model.safetensors").is_file()
    (record,) = Registry(Store.open(db).engine).versions(agent="support")
    assert record.state == "candidate"


def test_bad_input_is_a_message_not_a_traceback(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "evolvable.cli.main", "train", "--from-file", "a.jsonl", "--dataset", "x"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert done.returncode != 0
    assert "exactly one of" in done.stderr and "Traceback" not in done.stderr
