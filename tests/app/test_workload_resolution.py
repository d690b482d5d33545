"""How the composition root resolves an agent's workload: entry point, module:object, webhook (by contract)."""

from __future__ import annotations

import sys
import types

import pytest

from evolvable.app.config import WorkloadSection
from evolvable.app.control import load_workload
from evolvable.control.workloads import WorkloadError


def test_entry_point_and_object() -> None:
    assert load_workload(WorkloadSection(entry_point="support_desk")).name == "support_desk"
    assert load_workload(WorkloadSection(object="tests.app.travel_agent:workload")).name == "travel"
    with pytest.raises(WorkloadError, match="no workload named"):
        load_workload(WorkloadSection(entry_point="nope"))


def test_webhook_is_built_from_the_section(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[tuple[str, float, dict[str, object]]] = []

    class WebhookWorkload:
        name = "webhook"

        def __init__(self, url: str, *, timeout_s: float, options: dict[str, object]) -> None:
            made.append((url, timeout_s, dict(options)))

        def suite(self, context: object) -> object:
            raise NotImplementedError

    module = types.ModuleType("evolvable.control.webhook")
    module.WebhookWorkload = WebhookWorkload  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "evolvable.control.webhook", module)
    section = WorkloadSection(webhook="https://agents.example/replay", timeout_s=12, options={"suite": "v3"})
    assert load_workload(section).name == "webhook"
    assert made == [("https://agents.example/replay", 12.0, {"suite": "v3"})]


def test_webhook_without_its_module_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "evolvable.control.webhook", None)  # not installed here
    with pytest.raises(WorkloadError, match="webhook workloads are not available"):
        load_workload(WorkloadSection(webhook="https://agents.example/replay"))
