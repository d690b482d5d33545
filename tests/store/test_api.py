"""The public surface other components code against stays what the brief promises."""

from __future__ import annotations

import inspect
from dataclasses import fields

import evolvable.store
from evolvable.store import Store, TrajectoryFilter


def test_all_lists_the_public_names() -> None:
    assert sorted(evolvable.store.__all__) == [
        "InvalidCursor",
        "RunDocuments",
        "Store",
        "TrajectoryFilter",
        "events_of",
        "metadata",
    ]
    for name in evolvable.store.__all__:
        assert getattr(evolvable.store, name) is not None


def test_store_methods_and_parameters() -> None:
    expected = {
        "open": ["url", "migrate_schema"],
        "apply_events": ["events"],
        "apply_runs": ["runs"],
        "put_trajectory": ["trajectory"],
        "get_trajectory": ["trajectory_id", "tenant_id"],
        "get_header": ["trajectory_id", "tenant_id"],
        "list_trajectories": ["f", "limit", "cursor"],
        "iter_trajectories": ["f", "batch_size"],
        "count": ["f"],
        "delete_trajectories": ["f", "batch_size"],
        "find_step": ["trajectory_id", "tool_call_id", "response_id"],
    }
    for method, params in expected.items():
        signature = inspect.signature(getattr(Store, method))
        assert [p for p in signature.parameters if p not in ("self", "cls")] == params, method


def test_filter_fields() -> None:
    assert [f.name for f in fields(TrajectoryFilter)] == [
        "tenant_id",
        "agent",
        "status",
        "harness_version",
        "policy_version",
        "end_user",
        "task_id",
        "started_after",
        "started_before",
        "ids",
        "has_outcome",
    ]
    assert TrajectoryFilter().is_empty() and not TrajectoryFilter(agent="a").is_empty()


def test_importing_evolvable_does_not_import_the_store() -> None:
    import subprocess
    import sys

    code = "import sys, evolvable; print('evolvable.store' in sys.modules, callable(evolvable.trajectory))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "True"]
