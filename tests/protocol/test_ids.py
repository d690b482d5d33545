"""`new_id`: time-ordered (UUID version 7 layout), unique, and never repeated by a forked process."""

from __future__ import annotations

import multiprocessing
import re
import time
import uuid

from evolvable.protocol.models import new_id

_ID = re.compile(r"traj_[0-9a-f]{32}")


def test_an_id_is_a_uuid_version_7_with_its_prefix() -> None:
    before = time.time_ns() // 1_000_000
    made = new_id("traj")
    after = time.time_ns() // 1_000_000
    assert _ID.fullmatch(made)
    value = uuid.UUID(hex=made.removeprefix("traj_"))
    assert value.version == 7
    assert value.variant == uuid.RFC_4122
    assert before <= value.int >> 80 <= after  # its first 48 bits: the Unix milliseconds it was made at


def test_ids_made_later_sort_later() -> None:
    made = []
    for _ in range(5):
        made.append(new_id("step"))
        time.sleep(0.002)  # (within one millisecond the order is random: only the time part orders)
    assert made == sorted(made)


def test_ids_made_in_the_same_millisecond_differ() -> None:
    made = [new_id("evt") for _ in range(20_000)]
    assert len(set(made)) == len(made)


def _ids_in_child(queue: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    queue.put([new_id("traj") for _ in range(2_000)])


def test_a_forked_process_does_not_repeat_its_parents_ids() -> None:
    """The capture writer is forked from the proxy: a generator whose state the fork copied would make both
    produce the same ids in the same millisecond."""
    new_id("traj")  # any state a generator keeps is made before the fork
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_ids_in_child, args=(queue,))
    child.start()
    ours = {new_id("traj") for _ in range(2_000)}
    theirs = set(queue.get(timeout=30))
    child.join(30)
    assert len(theirs) == 2_000
    assert not ours & theirs
