"""Timestamps a converter may or may not know, as typed keyword arguments."""

from __future__ import annotations

from datetime import datetime
from typing import TypedDict


class Stamps(TypedDict, total=False):
    started_at: datetime
    ended_at: datetime


def known_stamps(started_at: datetime | None = None, ended_at: datetime | None = None) -> Stamps:
    """Only the known timestamps, so a model's own defaults (started now) apply to the unknown ones."""
    stamps = Stamps()
    if started_at:
        stamps["started_at"] = started_at
    if ended_at:
        stamps["ended_at"] = ended_at
    return stamps
