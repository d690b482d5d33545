"""Row values the store writes without pydantic's or SQLAlchemy's generic paths must be what those paths write.

`header_document` reads a header's free-form fields directly when they hold plain JSON values and dumps the header
otherwise; `sqlite_utc_text` formats a UTC timestamp from its ISO text. Both are compared with the generic path
on values of every kind a header or a timestamp can hold."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest
from pydantic import BaseModel

from evolvable.protocol.models import CaptureMode, TrajectoryHeader
from evolvable.store.engine import dumps_json
from evolvable.store.rows import HEADER_DOCUMENT_FIELDS, header_document
from evolvable.store.sqlite_bulk import sqlite_utc_text


class _Spec(BaseModel):
    name: str = "x"


PLAIN: list[Any] = [
    None,
    "text",
    "",
    0,
    -7,
    2**62,
    1.5,
    -0.0,
    True,
    False,
    [],
    {},
    [1, "a", None, [2.5, {"k": False}]],
    {"order": "A-1", "items": [{"sku": 1, "qty": 2}], "note": None, "nested": {"deep": {"x": [1.0]}}},
]
NOT_PLAIN: list[Any] = [
    math.inf,
    math.nan,
    {"x": -math.inf},
    [math.nan],
    datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
    {"when": datetime(2026, 1, 2, tzinfo=UTC)},
    (1, 2),
    {"t": (1, "a")},
    {1: "int key"},
    Decimal("1.25"),
    b"bytes",
    _Spec(),
    {"spec": _Spec()},
    {"s": {1, 2}},
    2**70,
]


def _generic(header: TrajectoryHeader) -> dict[str, Any]:
    return header.model_dump(mode="json", include=HEADER_DOCUMENT_FIELDS)


@pytest.mark.parametrize("value", PLAIN + NOT_PLAIN, ids=repr)
def test_the_header_document_is_the_json_dump(value: Any) -> None:
    for task_input, metadata in ((value, {}), (None, {"value": value}), (value, {"value": value, "other": "x"})):
        header = TrajectoryHeader(task_input=task_input, metadata=metadata, capture=CaptureMode.metadata)
        document, expected = header_document(header), _generic(header)
        assert document == expected or _both_nan(document, expected)
        assert list(document) == list(expected)  # the same key order, so the same JSON text
        try:
            expected_text = dumps_json(expected)
        except TypeError:  # (a value JSON cannot hold, e.g. an int beyond 64 bits: neither path stores it)
            with pytest.raises(TypeError):
                dumps_json(document)
            continue
        assert dumps_json(document) == expected_text


@pytest.mark.parametrize("value", PLAIN, ids=repr)
def test_plain_values_are_read_without_a_dump(value: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    header = TrajectoryHeader(task_input=value, metadata={"session": "none", "value": value})
    expected = _generic(header)

    def no_dump(*_args: Any, **_kwargs: Any) -> Any:
        raise AssertionError("a plain header was dumped")

    monkeypatch.setattr(TrajectoryHeader, "model_dump", no_dump)
    document = header_document(header)
    assert document == expected
    assert document["metadata"] is not header.metadata  # a copy: the row's document never aliases the model's


def _both_nan(a: Any, b: Any) -> bool:
    return repr(a) == repr(b)


TIMESTAMPS = [
    datetime(2026, 11, 27, 15, 40, 29, 452464, tzinfo=UTC),
    datetime(2026, 11, 27, 15, 40, 29, tzinfo=UTC),
    datetime(1, 1, 1, tzinfo=UTC),
    datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
    datetime(2026, 3, 29, 1, 30, tzinfo=timezone(timedelta(hours=2))),
    datetime(2026, 3, 29, 1, 30, 0, 7),
    TrajectoryHeader.model_validate({"started_at": "2026-11-27T15:40:29.5Z"}).started_at,  # pydantic's own UTC tz
    datetime.now(UTC),
]


@pytest.mark.parametrize("value", TIMESTAMPS, ids=str)
def test_sqlite_utc_text_is_the_naive_utc_iso_text(value: datetime) -> None:
    utc = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    assert sqlite_utc_text(value) == utc.replace(tzinfo=None).isoformat(sep=" ", timespec="microseconds")
    assert sqlite_utc_text(None) is None
