"""A launched embedded policy server gets the configured device and dtype on its command line."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from evolvable.app.config import EvolvableConfig, PolicyServerSection
from evolvable.app.endpoints import launch_policy_servers


def test_device_and_dtype_reach_the_launched_server(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    launched: list[Sequence[str]] = []

    @contextlib.contextmanager
    def fake_server(model: str, log_path: Path, *, max_batch: int, extra_args: Sequence[str] = ()) -> Iterator[str]:
        launched.append(extra_args)
        yield "http://127.0.0.1:1/v1"

    monkeypatch.setattr("evolvable.policy_server.launcher.policy_server", fake_server)
    config = EvolvableConfig.model_validate(
        {"policy_servers": [{"name": "gpu", "kind": "embedded", "device": "cuda:0", "dtype": "bfloat16"}]}
    )
    with contextlib.ExitStack() as resources:
        endpoints = launch_policy_servers(config, resources, tmp_path)
    assert endpoints == {"gpu": "http://127.0.0.1:1/v1"}
    assert list(launched[0]) == ["--device", "cuda:0", "--dtype", "bfloat16"]
    default: dict[str, Any] = PolicyServerSection(name="cpu", kind="embedded").model_dump()
    assert (default["device"], default["dtype"]) == ("cpu", "auto")  # CPU behaviour unchanged by default


@pytest.mark.parametrize("field", [{"device": "tpu"}, {"dtype": "int8"}])
def test_unknown_device_or_dtype_is_a_config_error(field: dict[str, str]) -> None:
    with pytest.raises(ValidationError):
        PolicyServerSection(name="x", kind="embedded", **field)  # type: ignore[arg-type]
