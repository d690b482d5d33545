"""Several threads applying the same events to one store, each in its own order and chunking: what
idempotent ingest must survive (every event applied exactly once, whoever came first)."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from evolvable.protocol.models import Event
from evolvable.store import Store


def apply_from_writers(store: Store, events: Sequence[Event], *, writers: int, chunk: int, stride: int) -> list[int]:
    """Writer k sends every event, rotated by k * stride, in chunks of `chunk`; returns each call's count
    of events applied. A writer's exception is re-raised here."""
    applied: list[int] = []
    errors: list[BaseException] = []
    events = list(events)

    def write(offset: int) -> None:
        try:
            order = events[offset:] + events[:offset]
            for i in range(0, len(order), chunk):
                applied.append(store.apply_events(order[i : i + chunk]))
        except BaseException as err:  # pragma: no cover - re-raised below
            errors.append(err)

    threads = [threading.Thread(target=write, args=(k * stride,)) for k in range(writers)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if errors:
        raise errors[0]
    return applied
