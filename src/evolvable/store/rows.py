"""ATDP models <-> table rows. Indexed fields are columns; the rest is a JSON document."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import TypeAdapter

from evolvable.protocol.models import Signal, Step, Trajectory, TrajectoryHeader
from evolvable.store.engine import RawJSON

HEADER_COLUMNS = (
    "id",
    "tenant_id",
    "agent",
    "status",
    "harness_version",
    "policy_version",
    "end_user",
    "task_id",
    "started_at",
    "ended_at",
)
HEADER_DOCUMENT_FIELDS = {"schema_version", "task_input", "capture", "metadata"}

STEP_ADAPTER: TypeAdapter[Step] = TypeAdapter(Step)


def header_row(header: TrajectoryHeader) -> dict[str, Any]:
    row = {name: getattr(header, name) for name in HEADER_COLUMNS}
    row["status"] = header.status.value
    row["placeholder"] = False
    row["header"] = header.model_dump(mode="json", include=HEADER_DOCUMENT_FIELDS)
    return row


def header_fields(row: Mapping[str, Any]) -> dict[str, Any]:
    """The TrajectoryHeader fields of a `trajectories` row."""
    return {**row["header"], **{name: row[name] for name in HEADER_COLUMNS}}


def header_from_row(row: Mapping[str, Any]) -> TrajectoryHeader:
    return TrajectoryHeader.model_validate(header_fields(row))


def step_row(trajectory_id: str, step: Step) -> dict[str, Any]:
    return {
        "trajectory_id": trajectory_id,
        "step_id": step.id,
        "kind": step.kind,
        "tool_call_id": getattr(step, "tool_call_id", None),
        "response_id": getattr(step, "response_id", None),
        "started_at": step.started_at,
        "body": RawJSON(step.model_dump_json()),
    }


def signal_row(trajectory_id: str, signal: Signal) -> dict[str, Any]:
    return {
        "trajectory_id": trajectory_id,
        "signal_id": signal.id,
        "step_id": signal.step_id,
        "kind": signal.kind.value,
        "value": signal.value,
        "created_at": signal.created_at,
        "body": RawJSON(signal.model_dump_json()),
    }


def assemble(header: Mapping[str, Any], step_bodies: Iterable[Any], signal_bodies: Iterable[Any]) -> Trajectory:
    """One Trajectory from its rows. A signal on a step that has not arrived yet stays out until the step does."""
    steps = list(step_bodies)
    known = {s["id"] for s in steps}
    signals = [g for g in signal_bodies if g.get("step_id") is None or g["step_id"] in known]
    return Trajectory.model_validate({**header_fields(header), "steps": steps, "signals": signals})
