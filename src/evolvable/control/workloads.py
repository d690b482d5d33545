"""Workloads are plugins: how the control plane gets replay tasks, verifiers and safety probes for an agent.

The control plane never imports a workload. A workload is any object with a `name` and a
`suite(context)` method returning a `ReplaySuite` (a runner that runs a harness / policy version on
tasks and returns per-task outcomes, with held-out tasks and safety probes). It is found by

- an entry point of the `evolvable.workloads` group (`entry_point: my_workload`),
- a `module:object` reference in the configuration (`object: my_team.agents:workload`), or
- an HTTP webhook (`webhook: https://...`): the agent team's own service runs the tasks against the
  proxy with a pinned harness version and answers with signals, so agents in any language can
  provide replay (see `control/webhook.py`).

The object may be the workload itself or a zero-argument factory returning it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any, Protocol, runtime_checkable

from evolvable.control.gates import ReplaySuite
from evolvable.errors import ControlError
from evolvable.protocol.harness import MemoryExemplar

ENTRY_POINT_GROUP = "evolvable.workloads"


class WorkloadError(ControlError):
    """A workload plugin cannot be found, built or used."""


@dataclass
class WorkloadContext:
    """What the composition root hands a workload to build its replay suite."""

    endpoint: str
    """OpenAI-compatible base URL replays run against (a policy server, so replays never become training data)."""
    model: str
    """The served model name the active policy answers to."""
    api_key: str | None = None
    sanitize: Callable[[MemoryExemplar], MemoryExemplar] | None = None
    """Runs over every exemplar a workload's explorer produces before it can reach the registry (redaction)."""
    options: Mapping[str, Any] = field(default_factory=dict)
    """The workload's own options from the configuration (task counts, seeds, timeouts...)."""


@runtime_checkable
class Workload(Protocol):
    """A replay provider for one agent: its tasks, verifiers and safety probes."""

    name: str

    def suite(self, context: WorkloadContext) -> ReplaySuite: ...


def available_workloads() -> list[str]:
    """Names registered in the `evolvable.workloads` entry-point group."""
    return sorted(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP))


def load_entry_point(name: str) -> Workload:
    matches = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == name]
    if not matches:
        known = ", ".join(available_workloads()) or "none installed"
        raise WorkloadError(f"no workload named {name!r} in entry-point group {ENTRY_POINT_GROUP} (known: {known})")
    try:
        loaded = matches[0].load()
    except Exception as exc:
        raise WorkloadError(f"workload entry point {name!r} failed to import: {exc}") from exc
    return _as_workload(loaded, f"entry point {name!r}")


def load_object(reference: str) -> Workload:
    """`package.module:attribute` (attribute may be dotted)."""
    module_name, sep, attribute = reference.partition(":")
    if not sep or not module_name or not attribute:
        raise WorkloadError(f"workload object {reference!r} must look like 'package.module:object'")
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as exc:
        raise WorkloadError(f"workload module {module_name!r} failed to import: {exc}") from exc
    for part in attribute.split("."):
        if not hasattr(obj, part):
            raise WorkloadError(f"workload object {reference!r}: {module_name} has no attribute {attribute!r}")
        obj = getattr(obj, part)
    return _as_workload(obj, f"object {reference!r}")


def _as_workload(obj: Any, where: str) -> Workload:
    """The object itself if it is a workload, else what calling it returns (a class or a factory)."""
    if isinstance(obj, type) or (not isinstance(obj, Workload) and callable(obj)):
        try:
            obj = obj()
        except Exception as exc:
            raise WorkloadError(f"workload factory {where} raised: {exc}") from exc
    if not isinstance(obj, Workload):
        raise WorkloadError(f"{where} is not a workload (needs a `name` and a `suite(context)` method)")
    return obj
