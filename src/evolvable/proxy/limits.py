"""Input limits: what a client sends is checked before it can reach the spool.

A record the background writer cannot store would otherwise be answered 2xx and then fail on every
retry (a poison pill for every tenant), so the proxy refuses it up front with a 4xx in the OpenAI
error shape. The checks here are generic (nesting depth, non-finite numbers, timestamps a database
can hold) and cheap; the hot path applies only the field-shape checks its converter relies on.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel
from starlette.types import Message, Receive

from evolvable.errors import InvalidRequest, PayloadTooLarge

MAX_DEPTH = 64
"""Deepest nesting of objects and arrays accepted in a request body (agent payloads stay far below)."""

EARLIEST = datetime(1970, 1, 2, tzinfo=UTC)
LATEST = datetime(2200, 1, 1, tzinfo=UTC)
"""Timestamps outside this window are refused: both backends hold them, and no agent step happens outside it."""


class InvalidInput(InvalidRequest, ValueError):
    """A client payload the proxy must refuse with a 400 (message says which field and why)."""


def check_depth(value: Any, max_depth: int = MAX_DEPTH, raw: bytes | None = None) -> None:
    """Refuse nesting deeper than `max_depth` (iterative: a deep body cannot exhaust the stack).

    `raw`: the JSON text `value` was parsed from. Nesting cannot be deeper than the number of `{` and `[` in
    it (counted in C, in strings too), so a body with no more than `max_depth` of them needs no walk: most
    calls, where the walk cost more than any other check of the request."""
    if raw is not None and raw.count(b"{") + raw.count(b"[") <= max_depth:
        return
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > max_depth:
            raise InvalidInput(f"request nested deeper than {max_depth} levels")
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))


def _walk(value: Any, path: str) -> Iterator[tuple[str, Any]]:
    """Every leaf of a validated model or plain structure, with a dotted path for error messages."""
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, BaseModel):
            stack.extend((getattr(item, name), f"{where}.{name}") for name in type(item).model_fields)
        elif isinstance(item, dict):
            stack.extend((v, f"{where}.{k}") for k, v in item.items())
        elif isinstance(item, list | tuple):
            stack.extend((v, f"{where}[{i}]") for i, v in enumerate(item))
        else:
            yield where, item


def check_storable(value: Any, path: str = "body") -> None:
    """Refuse values no store can hold: NaN/infinite numbers and timestamps outside [EARLIEST, LATEST]."""
    for where, leaf in _walk(value, path):
        if isinstance(leaf, float) and not math.isfinite(leaf):
            raise InvalidInput(f"{where}: numbers must be finite")
        if isinstance(leaf, datetime):
            aware = leaf if leaf.tzinfo is not None else leaf.replace(tzinfo=UTC)
            try:
                in_range = EARLIEST <= aware <= LATEST
            except OverflowError:
                in_range = False
            if not in_range:
                raise InvalidInput(f"{where}: timestamp must lie between {EARLIEST.date()} and {LATEST.date()}")


def check_completion_body(body: dict[str, Any], endpoint: str, raw: bytes | None = None) -> None:
    """The fields capture converts must have their documented shapes (else the call could not be stored).
    `raw`: the JSON text of `body`, when there is one (see `check_depth`)."""
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise InvalidInput("'model' must be a string")
    tools = body.get("tools")
    if tools is not None and not (isinstance(tools, list) and all(isinstance(t, dict) for t in tools)):
        raise InvalidInput("'tools' must be a list of tool objects")
    user = body.get("user")
    if user is not None and not isinstance(user, str):
        raise InvalidInput("'user' must be a string")
    if endpoint == "chat":
        for i, message in enumerate(body.get("messages") or ()):
            role = message.get("role") if isinstance(message, dict) else None
            if not isinstance(role, str):
                raise InvalidInput(f"messages[{i}].role must be a string")
    check_depth(body, raw=raw)


class BodyTooLarge(PayloadTooLarge):
    """The request body exceeds the configured limit (answered 413)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"request body exceeds the limit of {limit} bytes")


class ClientGone(Exception):
    """The client disconnected before it finished sending the body."""


async def read_body(scope: dict[str, Any], receive: Any, limit: int) -> bytes:
    """The whole body, refused as soon as the declared or received size passes `limit` (never buffered past it)."""
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            if value.isdigit() and int(value) > limit:
                raise BodyTooLarge(limit)
            break
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(limit)
        parts.append(chunk)
        if not message.get("more_body"):
            return parts[0] if len(parts) == 1 else b"".join(parts)


def replay(body: bytes, receive: Receive) -> Receive:
    """A `receive` that hands the already-read body to the app once, then defers to the real one."""
    sent = False

    async def receive_again() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return receive_again
