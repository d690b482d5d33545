"""Which device a trainer process takes, and clear errors for devices that are not there."""

from __future__ import annotations

import pytest
import torch

from evolvable.errors import TrainingError
from evolvable.trainer.config import RLConfig
from evolvable.trainer.loop import uses_cpu


def _gpus(monkeypatch: pytest.MonkeyPatch, count: int) -> None:
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)


def test_auto_takes_the_gpu_only_when_each_local_process_has_one(monkeypatch: pytest.MonkeyPatch) -> None:
    _gpus(monkeypatch, 1)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    assert uses_cpu("auto") is False
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")  # two processes, one GPU: "invalid device ordinal" otherwise
    assert uses_cpu("auto") is True
    _gpus(monkeypatch, 0)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    assert uses_cpu("auto") is True
    assert uses_cpu("cpu") is True


def test_cuda_without_a_gpu_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    _gpus(monkeypatch, 0)
    with pytest.raises(TrainingError, match="no CUDA GPU is visible"):
        uses_cpu("cuda")
    _gpus(monkeypatch, 1)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    with pytest.raises(TrainingError, match="2 processes on this machine but 1 GPU"):
        uses_cpu("cuda")


def test_unknown_device_or_precision_is_rejected() -> None:
    with pytest.raises(TrainingError, match="device must be"):
        RLConfig(device="tpu")
    with pytest.raises(TrainingError, match="mixed_precision must be"):
        RLConfig(mixed_precision="int8")
