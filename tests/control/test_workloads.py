"""Workload plugins: found by entry point or `module:object`, refused with a clear error otherwise."""

from __future__ import annotations

import sys
import types

import pytest

from evolvable.control.gates import ReplaySuite, TaskOutcome
from evolvable.control.workloads import (
    Workload,
    WorkloadContext,
    WorkloadError,
    available_workloads,
    load_entry_point,
    load_object,
)


class _EchoRunner:
    def run(self, harness, policy, tasks):
        return [TaskOutcome(task_id=t, cluster="c", success=True) for t in tasks]


class _TinyWorkload:
    name = "tiny"

    def suite(self, context: WorkloadContext) -> ReplaySuite:
        return ReplaySuite(_EchoRunner(), holdout=["a", "b"], safety=["s"])


@pytest.fixture
def plugin_module() -> types.ModuleType:
    module = types.ModuleType("evolvable_test_plugin")
    module.workload = _TinyWorkload()  # type: ignore[attr-defined]
    module.factory = _TinyWorkload  # type: ignore[attr-defined]
    module.not_a_workload = 42  # type: ignore[attr-defined]

    def broken() -> None:
        raise RuntimeError("boom")

    module.broken = broken  # type: ignore[attr-defined]
    sys.modules[module.__name__] = module
    yield module
    del sys.modules[module.__name__]


def test_support_desk_is_an_installed_entry_point() -> None:
    assert "support_desk" in available_workloads()
    workload = load_entry_point("support_desk")
    assert isinstance(workload, Workload)
    suite = workload.suite(WorkloadContext("http://127.0.0.1:9/v1", "m", options={"gate_tasks": 6, "safety_tasks": 2}))
    assert len(suite.holdout) == 6 and len(suite.safety) == 2


def test_object_reference_and_factory(plugin_module: types.ModuleType) -> None:
    assert load_object("evolvable_test_plugin:workload").name == "tiny"
    suite = load_object("evolvable_test_plugin:factory").suite(WorkloadContext("http://x/v1", "m"))
    assert suite.runner.run(None, None, suite.holdout)[1].task_id == "b"


@pytest.mark.parametrize(
    ("reference", "message"),
    [
        ("no_colon", "must look like"),
        ("evolvable_test_plugin_missing:workload", "failed to import"),
        ("evolvable_test_plugin:absent", "has no attribute"),
        ("evolvable_test_plugin:not_a_workload", "is not a workload"),
        ("evolvable_test_plugin:broken", "raised: boom"),
    ],
)
def test_bad_references_are_clear_errors(plugin_module: types.ModuleType, reference: str, message: str) -> None:
    with pytest.raises(WorkloadError, match=message):
        load_object(reference)


def test_unknown_entry_point_names_the_known_ones() -> None:
    with pytest.raises(WorkloadError, match="support_desk"):
        load_entry_point("no_such_workload")
