"""ATDP models rebuilt from JSON the store itself wrote, without validating it a second time.

Every step, signal and header body in the store was serialized by pydantic from a validated model, so
validating it again on every read (pydantic's `validate_json`, ~80% of the training read's CPU) only
re-proves what the write proved. Here each model class gets a builder, derived once from its fields,
that does what validation would do to such data and nothing else: nested models, datetimes (with
pydantic's own `TzInfo`), enums, tuples and ints in float fields become what validation makes of
them; everything else is taken as decoded. Objects are created the way `model_construct` creates
them (same `__dict__`, fields set, extras), so they equal validated ones field for field.

Only for data the store wrote: external input is always validated. Anything unexpected (a missing
required field, an unknown one on a strict model, a type the plan does not know) raises `Untrusted`
(or the error of the conversion that failed) and the caller validates the data instead, which
either gives the same model or the proper validation error.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from enum import Enum
from functools import cache
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import orjson
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import TzInfo

from evolvable.protocol.models import SCHEMA_VERSION, Signal, Step, Trajectory, TrajectoryHeader

Convert = Callable[[Any], Any]
_set_attr = object.__setattr__
_PASS_THROUGH = (str, int, bool, type(None))
"""Types whose decoded JSON value is exactly what validation returns (`int`: JSON integers only)."""
_MAJOR = SCHEMA_VERSION.split(".", 1)[0]


class Untrusted(ValueError):
    """The data is not what the store writes: validate it instead."""


# --------------------------------------------------------------------------- leaf conversions


@cache
def _tz(offset: timedelta) -> TzInfo:
    return TzInfo(int(offset.total_seconds()))


def _datetime(value: Any) -> datetime:
    """A stored timestamp as validation returns it: aware ones carry pydantic's `TzInfo`."""
    if type(value) is str:
        stamp = datetime.fromisoformat(value)
    elif isinstance(value, datetime):  # (header columns arrive as datetimes already)
        stamp = value
    else:
        raise Untrusted(f"not a timestamp: {value!r}")
    offset = stamp.utcoffset()
    return stamp if offset is None or type(stamp.tzinfo) is TzInfo else stamp.replace(tzinfo=_tz(offset))


def _float(value: Any) -> float:
    if type(value) is float:
        return value
    if type(value) is int:
        return float(value)
    raise Untrusted(f"not a number: {value!r}")


def _floats(values: Any) -> list[float]:
    if type(values) is not list:
        raise Untrusted("not a list")
    if all(type(v) is float for v in values):
        return values
    return [_float(v) for v in values]


def _enum(kind: type[Enum]) -> Convert:
    members = {member.value: member for member in kind}

    def convert(value: Any) -> Enum:
        try:
            return members[value]
        except (KeyError, TypeError):
            raise Untrusted(f"not a {kind.__name__}: {value!r}") from None

    return convert


def _optional(inner: Convert) -> Convert:
    return lambda value: None if value is None else inner(value)


def _list_of(inner: Convert) -> Convert:
    def convert(values: Any) -> list[Any]:
        if type(values) is not list:
            raise Untrusted("not a list")
        return [inner(v) for v in values]

    return convert


def _pair(value: Any) -> tuple[Any, Any]:
    if type(value) is not list or len(value) != 2 or not all(type(v) is int for v in value):
        raise Untrusted(f"not a pair of ints: {value!r}")
    return (value[0], value[1])


def _model(cls: type[BaseModel]) -> Convert:
    """The builder of `cls`, looked up on first use (models may refer to each other)."""
    resolved: list[Convert] = []

    def convert(value: Any) -> Any:
        if not resolved:
            resolved.append(builder(cls))
        return resolved[0](value)

    return convert


def _tagged(tag: str, members: Iterable[type[BaseModel]]) -> Convert:
    """A discriminated union: the builder of the member whose literal `tag` the data names."""
    by_tag: dict[Any, Convert] = {}
    for member in members:
        for value in get_args(member.__pydantic_fields__[tag].annotation):
            by_tag[value] = _model(member)

    def convert(value: Any) -> Any:
        try:
            build = by_tag[value[tag]]
        except (KeyError, TypeError):
            raise Untrusted(f"no {tag} of a known member: {value!r}") from None
        return build(value)

    return convert


# --------------------------------------------------------------------------- plans from annotations


def _converter(annotation: Any, field: FieldInfo | None = None) -> Convert | None:
    """What turns the decoded JSON of a value of this type into what validation returns; None: nothing."""
    origin, args = get_origin(annotation), get_args(annotation)
    discriminator = field.discriminator if field is not None else None
    if origin is Annotated:
        tags = [m.discriminator for m in args[1:] if isinstance(m, FieldInfo) and m.discriminator]
        return _converter(args[0], FieldInfo(annotation=args[0], discriminator=tags[0]) if tags else None)
    if annotation is Any or annotation in _PASS_THROUGH:
        return None
    if annotation is float:
        return _float
    if annotation is datetime:
        return _datetime
    if origin is Literal:
        return None
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return _enum(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return _model(annotation)
    if origin in (Union, types.UnionType):
        members = [a for a in args if a is not type(None)]
        if isinstance(discriminator, str):
            return (
                _optional(_tagged(discriminator, members))
                if len(members) < len(args)
                else _tagged(discriminator, members)
            )
        inner = [_converter(a) for a in members]
        if all(c is None for c in inner):
            return None
        if len(members) == 1 and inner[0] is not None:
            return _optional(inner[0])
        raise TypeError(f"no trusted conversion for {annotation!r}")
    if origin is list:
        if args[0] is float:
            return _floats
        item = _converter(
            args[0], FieldInfo(annotation=args[0], discriminator=discriminator) if discriminator else None
        )
        return None if item is None else _list_of(item)
    if origin is dict:
        if args[0] is not str or _converter(args[1]) is not None:
            raise TypeError(f"no trusted conversion for {annotation!r}")
        return None
    if origin is tuple and args == (int, int):
        return _pair
    raise TypeError(f"no trusted conversion for {annotation!r}")


@cache
def builder(cls: type[BaseModel]) -> Callable[[Any], Any]:
    """The trusted constructor of `cls`: a decoded JSON object in, an instance of `cls` out."""
    fields = cls.__pydantic_fields__
    order = tuple(fields)
    conversions = {name: c for name, field in fields.items() if (c := _converter(field.annotation, field)) is not None}
    converted = tuple(conversions.items())
    allow_extra = cls.model_config.get("extra") == "allow"
    new = cls.__new__

    def build(data: Any) -> Any:
        if type(data) is not dict:
            raise Untrusted(f"not an object for {cls.__name__}")
        if tuple(data) == order:  # every field, in order, nothing else: as pydantic serializes the model
            values, present = data, set(order)
            for name, convert in converted:
                values[name] = convert(values[name])
            extra: dict[str, Any] | None = {} if allow_extra else None
        else:
            values, present, extra = _general(cls, fields, conversions, data)
            if extra is not None and not allow_extra:
                raise Untrusted(f"{cls.__name__} has no fields {sorted(extra)}")
            if allow_extra:
                extra = extra or {}
                present.update(extra)  # (validation counts extras as set fields too)
        model = new(cls)
        _set_attr(model, "__dict__", values)
        _set_attr(model, "__pydantic_fields_set__", present)
        _set_attr(model, "__pydantic_extra__", extra)
        _set_attr(model, "__pydantic_private__", None)
        return model

    if cls.__pydantic_post_init__ or cls.__private_attributes__ or cls.__pydantic_root_model__:
        raise TypeError(f"{cls.__name__}: no trusted constructor for models with post-init or private state")
    decorators = cls.__pydantic_decorators__
    unaccounted = {*decorators.field_validators, *decorators.model_validators} - ACCOUNTED_VALIDATORS.get(
        cls.__name__, set()
    )
    if unaccounted:
        raise TypeError(f"{cls.__name__}: validators the trusted read does not account for: {sorted(unaccounted)}")
    return build


ACCOUNTED_VALIDATORS = {
    "Signal": {"_finite"},
    "CompletionChoice": {"_aligned"},
    "TrajectoryHeader": {"_same_major"},
    "Trajectory": {"_same_major", "_references_resolve"},
}
"""Validators the trusted read may skip, and why: each held when the store wrote the row (the value it
stored is the one that passed), except `_same_major`, which `trajectory` checks, and the signal references
of `_references_resolve`, which `rows.assemble` ensures by keeping only signals whose steps it returns
((trajectory, step id) is unique, so step ids are). A new validator on a model makes its builder fail to
be created until it is accounted for here."""


def _general(
    cls: type[BaseModel], fields: dict[str, FieldInfo], conversions: dict[str, Convert], data: dict[str, Any]
) -> tuple[dict[str, Any], set[str], dict[str, Any] | None]:
    """Values, fields set and extras for data in another order, with fields missing (defaults) or extra keys."""
    values: dict[str, Any] = {}
    present: set[str] = set()
    for name, field in fields.items():
        if name in data:
            convert = conversions.get(name)
            values[name] = data[name] if convert is None else convert(data[name])
            present.add(name)
        elif field.is_required():
            raise Untrusted(f"{cls.__name__}.{name} is missing")
        else:
            values[name] = field.get_default(call_default_factory=True, validated_data=values)
    extra = {key: value for key, value in data.items() if key not in fields} if len(present) < len(data) else None
    return values, present, extra


# --------------------------------------------------------------------------- entry points


def step(text: str | bytes) -> Any:
    """One stored step body."""
    return _STEP(orjson.loads(text))


def signal(text: str | bytes) -> Signal:
    built: Signal = builder(Signal)(orjson.loads(text))
    return built


def trajectory(header: dict[str, Any], steps: Iterable[str], signals: Iterable[str]) -> Trajectory:
    """A Trajectory from its header fields (`rows.header_fields`) and stored step and signal bodies, as
    `Trajectory.model_validate_json` of the spliced document would build it."""
    version = header.get("schema_version", SCHEMA_VERSION)
    if type(version) is not str or version.split(".", 1)[0] != _MAJOR:
        raise Untrusted(f"schema_version {version!r}")
    head: TrajectoryHeader = builder(TrajectoryHeader)(header)
    values = head.__dict__
    values["steps"] = [_STEP(orjson.loads(text)) for text in steps]
    values["signals"] = [_SIGNAL(orjson.loads(text)) for text in signals]
    model = Trajectory.__new__(Trajectory)
    _set_attr(model, "__dict__", values)
    _set_attr(model, "__pydantic_fields_set__", head.__pydantic_fields_set__ | {"steps", "signals"})
    _set_attr(model, "__pydantic_extra__", None)
    _set_attr(model, "__pydantic_private__", None)
    return model


def _required(convert: Convert | None) -> Convert:
    if convert is None:
        raise TypeError("a model type always needs its builder")
    return convert


_STEP = _required(_converter(Step))
_SIGNAL = builder(Signal)
if tuple(Trajectory.__pydantic_fields__) != (*TrajectoryHeader.__pydantic_fields__, "steps", "signals"):
    raise TypeError("Trajectory is no longer its header's fields plus steps and signals: update `trajectory`")
