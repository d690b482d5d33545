"""ATDP models <-> table rows. Indexed fields are columns; the rest is a JSON document."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import orjson
import sqlalchemy as sa
from pydantic import TypeAdapter
from pydantic_core import SchemaValidator

from evolvable.protocol.models import Signal, Step, Trajectory, TrajectoryHeader
from evolvable.store.engine import RawJSON

# A `trajectories` row: SQLAlchemy's RowMapping (keyed by name or column) or a plain dict.
TrajectoryRow = sa.RowMapping | Mapping[str, Any]

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

_TRAJECTORY_FROM_JSON = SchemaValidator(Trajectory.__pydantic_core_schema__, config={"cache_strings": "keys"})
"""`Trajectory.model_validate_json`, except that only keys go through pydantic's process-wide string cache:
by default every short value would too (trajectory ids, message text), which held on to up to 16k of them."""


def header_row(header: TrajectoryHeader) -> dict[str, Any]:
    row = {name: getattr(header, name) for name in HEADER_COLUMNS}
    row["status"] = header.status.value
    row["placeholder"] = False
    row["header"] = header.model_dump(mode="json", include=HEADER_DOCUMENT_FIELDS)
    return row


def header_fields(row: TrajectoryRow) -> dict[str, Any]:
    """The TrajectoryHeader fields of a `trajectories` row."""
    return {**row["header"], **{name: row[name] for name in HEADER_COLUMNS}}


def header_from_row(row: TrajectoryRow) -> TrajectoryHeader:
    return TrajectoryHeader.model_validate(header_fields(row))


def step_row(trajectory_id: str, step: Step) -> dict[str, Any]:
    return {
        "trajectory_id": trajectory_id,
        "step_id": step.id,
        "kind": step.kind,
        # (__dict__: pydantic's __getattr__ fallback for a field this step kind lacks is slow)
        "tool_call_id": step.__dict__.get("tool_call_id"),
        "response_id": step.__dict__.get("response_id"),
        "started_at": step.started_at,
        "body": RawJSON(step.__pydantic_serializer__.to_json(step).decode()),  # (= model_dump_json, minus its wrapper)
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


def assemble(
    header: TrajectoryRow, steps: Iterable[tuple[str, str]], signals: Iterable[tuple[str | None, str]]
) -> Trajectory:
    """One Trajectory from its rows: steps and signals as (step_id, stored JSON text), in arrival order.

    The stored texts are spliced into one JSON document that pydantic parses once, straight into
    models (decoding each body into dicts and validating those took about twice the CPU).
    A signal on a step that has not arrived yet stays out until the step does.
    """
    step_rows = list(steps)
    known = {step_id for step_id, _ in step_rows}
    kept = [text for step_id, text in signals if step_id is None or step_id in known]
    head = orjson.dumps(header_fields(header))
    bodies = ",".join(text for _, text in step_rows)
    document = b"".join((head[:-1], b',"steps":[', bodies.encode(), b'],"signals":[', ",".join(kept).encode(), b"]}"))
    trajectory: Trajectory = _TRAJECTORY_FROM_JSON.validate_json(document)  # (pydantic-core returns Any)
    return trajectory
