"""ATDP models <-> table rows. Indexed fields are columns; the rest is a JSON document."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, get_args

import orjson
import sqlalchemy as sa
from pydantic import BaseModel, TypeAdapter
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
    row["header"] = header_document(header)
    return row


def header_document(header: TrajectoryHeader) -> dict[str, Any]:
    """The header's `HEADER_DOCUMENT_FIELDS` as `model_dump(mode="json")` writes them. When its free-form fields
    hold plain JSON values (what a dump in JSON mode copies as they are: the usual case) they are read directly,
    1.4x cheaper than the dump; anything else goes through the dump."""
    task_input, metadata = header.task_input, header.metadata
    if type(metadata) is dict and _json_plain(metadata) and _json_plain(task_input):
        return {
            "schema_version": header.schema_version,
            "task_input": task_input,
            "capture": header.capture.value,
            "metadata": dict(metadata),
        }
    return header.model_dump(mode="json", include=HEADER_DOCUMENT_FIELDS)


def _json_plain(value: Any) -> bool:
    """JSON types a dump in JSON mode leaves as they are: str keys, finite floats, ints, str, bool, None."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return True
    if kind is float:
        return math.isfinite(value)
    if kind is dict:
        return all(type(k) is str and _json_plain(v) for k, v in value.items())
    if kind is list:
        return all(_json_plain(v) for v in value)
    return False


def header_fields(row: TrajectoryRow) -> dict[str, Any]:
    """The TrajectoryHeader fields of a `trajectories` row."""
    return {**row["header"], **{name: row[name] for name in HEADER_COLUMNS}}


def header_from_row(row: TrajectoryRow) -> TrajectoryHeader:
    return TrajectoryHeader.model_validate(header_fields(row))


def _own_models() -> frozenset[type[BaseModel]]:
    """The ATDP model classes a step or signal can hold (found from the annotations, so new ones count)."""
    found: set[type[BaseModel]] = set()
    pending: list[Any] = [Trajectory]
    while pending:
        annotation = pending.pop()
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            if annotation not in found:
                found.add(annotation)
                pending += [field.annotation for field in annotation.__pydantic_fields__.values()]
        else:
            pending += get_args(annotation)
    return frozenset(found)


_OWN_MODELS = _own_models()
_OWN_SERIALIZATION = not any(
    cls.__pydantic_decorators__.field_serializers
    or cls.__pydantic_decorators__.model_serializers
    or cls.__pydantic_decorators__.computed_fields
    or any(f.alias or f.serialization_alias or f.exclude for f in cls.__pydantic_fields__.values())
    for cls in _OWN_MODELS
)


def _plain(value: Any) -> Any:
    """orjson's fallback: an ATDP model as the dict pydantic serializes (its fields, then its extras)."""
    if type(value) in _OWN_MODELS:
        extra = value.__pydantic_extra__
        return {**value.__dict__, **extra} if extra else value.__dict__
    raise TypeError  # anything else: pydantic serializes the whole model (see `dumps_model`)


def dumps_model(model: BaseModel) -> str:
    """The model's JSON document, as `model_dump_json` writes it, at a third of its CPU.

    orjson writes the fields of our own models (no custom serializers, aliases or exclusions: checked
    above) and the JSON types they hold; a value of another type anywhere inside (a set, bytes, a
    foreign model, an int beyond 64 bits, ...) makes pydantic serialize the whole model instead, so
    every such value is written exactly as before. Timestamps are ISO 8601 either way (orjson writes
    the same text, UTC as `Z`), so a stored document reads back as the same model."""
    if _OWN_SERIALIZATION:
        try:
            return orjson.dumps(model, default=_plain, option=_ORJSON_OPTIONS).decode()
        except TypeError:  # (orjson.JSONEncodeError)
            pass
    return model.__pydantic_serializer__.to_json(model).decode()


_ORJSON_OPTIONS = orjson.OPT_UTC_Z | orjson.OPT_PASSTHROUGH_DATACLASS


STEP_COLUMNS = ("trajectory_id", "step_id", "kind", "tool_call_id", "response_id", "started_at", "body")


def step_values(trajectory_id: str, step: Step) -> tuple[Any, ...]:
    """A `steps` row as values in `STEP_COLUMNS` order."""
    fields = step.__dict__  # (pydantic's __getattr__ fallback for a field this step kind lacks is slow)
    return (
        trajectory_id,
        step.id,
        step.kind,
        fields.get("tool_call_id"),
        fields.get("response_id"),
        step.started_at,
        RawJSON(dumps_model(step)),
    )


def step_row(trajectory_id: str, step: Step) -> dict[str, Any]:
    return dict(zip(STEP_COLUMNS, step_values(trajectory_id, step), strict=True))


def signal_row(trajectory_id: str, signal: Signal) -> dict[str, Any]:
    return {
        "trajectory_id": trajectory_id,
        "signal_id": signal.id,
        "step_id": signal.step_id,
        "kind": signal.kind.value,
        "value": signal.value,
        "created_at": signal.created_at,
        "body": RawJSON(dumps_model(signal)),
    }


def assemble(header: TrajectoryRow, step_bodies: str, signal_bodies: str) -> Trajectory:
    """One Trajectory from its header row and its stored step and signal JSON texts, each joined by commas
    in arrival order (`reads.trajectory_texts`).

    The texts are spliced into one JSON document that pydantic parses once, straight into models
    (decoding each body into dicts and validating those took about twice the CPU).
    """
    head = orjson.dumps(header_fields(header))
    document = b"".join(
        (head[:-1], b',"steps":[', step_bodies.encode(), b'],"signals":[', signal_bodies.encode(), b"]}")
    )
    trajectory: Trajectory = _TRAJECTORY_FROM_JSON.validate_json(document)  # (pydantic-core returns Any)
    return trajectory
