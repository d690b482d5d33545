"""The spool on its own: order, checkpoints, torn tails, purge, back-pressure, one owner at a time."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from evolvable.proxy.spool import Spool, SpoolError, SpoolFull, SpoolReader, list_segments, purge_spool


def _drain(spool: Spool) -> list[bytes]:
    out: list[bytes] = []
    reader = spool.reader
    while True:
        start = reader.load_checkpoint()
        records, nxt = reader.read(start, 3)
        if not records and nxt == start:
            return out
        out += records
        reader.save_checkpoint(nxt)


def test_records_come_back_in_order_once(tmp_path: Path) -> None:
    with Spool(tmp_path, segment_bytes=200) as spool:
        for i in range(50):
            assert spool.append_nowait(f"r{i}".encode())
        assert spool.wait_written(50, 5) is not None
        assert _drain(spool) == [f"r{i}".encode() for i in range(50)]
        assert len(list_segments(tmp_path)) <= 2  # applied segments are deleted
    with Spool(tmp_path) as spool:  # reopened: nothing is replayed
        assert _drain(spool) == []


def test_unapplied_records_survive_a_restart_and_torn_tails_are_cut(tmp_path: Path) -> None:
    with Spool(tmp_path) as spool:
        for i in range(10):
            spool.append_nowait(f"r{i}".encode())
        spool.wait_written(10, 5)
        _records, nxt = spool.reader.read(spool.reader.load_checkpoint(), 4)
        spool.reader.save_checkpoint(nxt)
        last = spool.end[0]
    with open(tmp_path / f"{last:012d}.seg", "ab") as f:
        f.write(b"\x40\x00\x00\x00garbage")  # a frame cut short by a crash
    with Spool(tmp_path) as spool:
        assert _drain(spool) == [f"r{i}".encode() for i in range(4, 10)]


def test_purge_removes_pending_and_applied_records(tmp_path: Path) -> None:
    with Spool(tmp_path) as spool:
        for i in range(20):
            spool.append_nowait(orjson.dumps({"tenant": "a" if i % 2 else "b", "i": i}))
        spool.wait_written(20, 5)
        _records, nxt = spool.reader.read(spool.reader.load_checkpoint(), 5)
        spool.reader.save_checkpoint(nxt)
        removed = spool.purge(lambda p: orjson.loads(p)["tenant"] == "a")
        assert removed == 8  # the odd ones among the 15 not yet applied
        spool.append_nowait(orjson.dumps({"tenant": "a", "i": 99}))
        spool.wait_written(21, 5)
        left = [orjson.loads(p)["i"] for p in _drain(spool)]
        assert left == [6, 8, 10, 12, 14, 16, 18, 99]
    everything = b"".join(p.read_bytes() for p in tmp_path.glob("*.seg"))
    assert b'"i":1,' not in everything and b'"i":3,' not in everything


def test_offline_purge_and_single_owner(tmp_path: Path) -> None:
    spool = Spool(tmp_path).open()
    with pytest.raises(SpoolError, match="in use"):
        Spool(tmp_path).open()
    spool.append_nowait(b"secret")
    spool.append_nowait(b"keep")
    spool.close()
    assert purge_spool(tmp_path, lambda p: p == b"secret") == 1
    with Spool(tmp_path) as reopened:
        assert _drain(reopened) == [b"keep"]


def test_back_pressure_waits_then_gives_up(tmp_path: Path) -> None:
    spool = Spool(tmp_path, queue_size=2).open()
    gate = threading.Event()
    original = spool._write_batch

    def slow(batch: list[bytes], rotate: bool) -> None:
        gate.wait(5)
        original(batch, rotate)

    spool._write_batch = slow  # type: ignore[method-assign]
    for i in range(100):  # the thread holds one batch and waits; the queue fills up
        if not spool.append_nowait(str(i).encode()):
            break
        time.sleep(0.01)
    else:
        raise AssertionError("the queue never filled")

    async def attempt() -> None:
        await spool.append(b"late", timeout_s=0.2)

    with pytest.raises(SpoolFull):
        asyncio.run(attempt())

    async def waits_then_succeeds() -> None:
        asyncio.get_running_loop().call_later(0.1, gate.set)
        await spool.append(b"late", timeout_s=5)

    asyncio.run(waits_then_succeeds())
    spool.close()


def test_checkpoint_is_rewritten_in_place_and_survives_a_torn_slot(tmp_path: Path) -> None:
    (tmp_path / "checkpoint").write_text("3 120\n")  # the text format of earlier versions
    reader = SpoolReader(tmp_path)
    assert reader.load_checkpoint() == (3, 120)
    reader.reserve_checkpoint()
    size = (tmp_path / "checkpoint").stat().st_size
    assert reader.load_checkpoint() == (3, 120) and size >= 4096
    reader.save_checkpoint((4, 0))
    reader.save_checkpoint((4, 64))
    assert reader.load_checkpoint() == (4, 64)
    assert (tmp_path / "checkpoint").stat().st_size == size  # in place: no new space needed
    with open(tmp_path / "checkpoint", "r+b") as f:  # tear the newest slot: the other one still holds
        data = f.read(64)
        counters = [int.from_bytes(data[offset + 4 : offset + 12], "little") for offset in (0, 32)]
        newest = 0 if counters[0] > counters[1] else 32
        f.seek(newest + 20)
        f.write(b"\xff\xff")
    assert reader.load_checkpoint() == (4, 0)


def test_interval_syncs_never_hold_up_a_waiting_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With `fsync: interval` a slow disk sync runs beside the writing thread: a record appended while
    one is in progress is written (and its caller woken) without waiting for it; the syncs still happen."""
    import evolvable.proxy.spool as spool_module

    real_fdatasync = spool_module.os.fdatasync
    syncing = threading.Event()
    synced: list[float] = []

    def slow_fdatasync(fd: int) -> None:
        syncing.set()
        time.sleep(0.4)
        real_fdatasync(fd)
        synced.append(time.monotonic())

    monkeypatch.setattr(spool_module.os, "fdatasync", slow_fdatasync)

    async def run() -> list[float]:
        waits = []
        with Spool(tmp_path, fsync="interval", fsync_interval_s=0.01) as spool:
            assert await spool.append_durable(b"first")
            assert syncing.wait(5)  # a sync is under way now
            for i in range(5):
                started = time.monotonic()
                assert await spool.append_durable(f"record {i}".encode())
                waits.append(time.monotonic() - started)
        return waits

    waits = asyncio.run(run())
    assert max(waits) < 0.2, waits  # in the writing thread each would have waited up to 0.4 s
    assert synced  # and the data was synced all the same
    records, _ = SpoolReader(tmp_path).read((0, 0), 10)
    assert len(records) == 6


def test_a_lone_durable_record_is_written_by_the_caller(tmp_path: Path) -> None:
    """No thread hand-off when nothing else is pending: the record is in the file when the call returns."""

    async def run(spool: Spool) -> None:
        handed_over = spool._queue.put_nowait
        spool._queue.put_nowait = lambda item: pytest.fail("queued")  # type: ignore[method-assign]
        try:
            for i in range(5):
                assert await spool.append_durable(f"r{i}".encode())
                records, _ = SpoolReader(tmp_path).read((0, 0), 10)
                assert len(records) == i + 1  # already in the segment file
        finally:
            spool._queue.put_nowait = handed_over  # type: ignore[method-assign]

    with Spool(tmp_path, fsync="interval") as spool:
        spool.slow_write_s = 60.0  # a loaded machine must not divert these to the spool thread
        asyncio.run(run(spool))
        assert spool.enqueued == 5 and spool.wait_written(5, 1) == spool.end
    assert _drain(Spool(tmp_path).open()) == [f"r{i}".encode() for i in range(5)]


def test_a_record_never_overtakes_one_queued_before_it(tmp_path: Path) -> None:
    with Spool(tmp_path, fsync="interval") as spool:
        with spool._file_lock:  # the spool thread is held before it can write what is queued
            assert spool.append_nowait(b"first")
            assert spool.write_now(b"second") is None
        assert spool.wait_written(1, 5) is not None

        async def second() -> bool:
            return await spool.append_durable(b"second")

        assert asyncio.run(second())
        records, _ = SpoolReader(tmp_path).read((0, 0), 10)
        assert records == [b"first", b"second"]


def test_batch_fsync_and_an_aged_segment_go_through_the_spool_thread(tmp_path: Path) -> None:
    with Spool(tmp_path / "batch", fsync="batch") as spool:
        assert spool.write_now(b"r") is None  # its fdatasync must not run on the event loop
    with Spool(tmp_path / "aged", fsync="interval", max_segment_age_s=0.2) as spool:
        spool.slow_write_s = 60.0  # only the segment's age may stop inline writes here (not a loaded machine)
        written = 0
        while spool.write_now(b"young") is True:  # kept busy (not idle) until the segment is too old
            written += 1
            assert written < 100, "never aged"
            time.sleep(0.02)
        # the spool thread writes it and starts a new segment
        assert spool.append_nowait(b"old") and spool.wait_written(written + 1, 5) is not None
        deadline = time.monotonic() + 5
        while spool.write_now(b"next") is None:  # until the spool thread has rotated
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert len(list_segments(tmp_path / "aged")) >= 2  # (an idle moment on a loaded machine may add one)


def _written_inline(spool: Spool, payload: bytes, timeout_s: float = 5.0) -> bool | None:
    """`write_now`, tried again while it answers None because another thread holds the segment for a moment (the
    spool thread's rotation check, the syncer taking a descriptor): on a loaded machine the first try can meet
    that. Only for tests where nothing else can make it answer None."""
    deadline = time.monotonic() + timeout_s
    while (written := spool.write_now(payload)) is None and time.monotonic() < deadline:
        time.sleep(0.001)
    return written


def test_records_written_by_callers_keep_the_segment_open(tmp_path: Path) -> None:
    """Idle rotation closes a segment nobody writes to, not one that `write_now` keeps writing."""
    with Spool(tmp_path, fsync="interval", rotate_idle_s=0.3, max_segment_age_s=30) as spool:
        spool.slow_write_s = 60.0
        for i in range(20):
            assert _written_inline(spool, f"r{i}".encode()) is True
            time.sleep(0.02)
        assert len(list_segments(tmp_path)) == 1
        time.sleep(1.0)  # now idle: rotated
        assert len(list_segments(tmp_path)) == 2


def test_a_slow_inline_write_sends_records_through_the_spool_thread_for_a_while(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import evolvable.proxy.spool as spool_module

    real_write = spool_module.os.write

    def slow_write(fd: int, data: Any) -> int:
        time.sleep(0.03)
        return real_write(fd, data)

    with Spool(tmp_path, fsync="interval") as spool:
        monkeypatch.setattr(spool_module.os, "write", slow_write)
        assert _written_inline(spool, b"slow") is True
        monkeypatch.setattr(spool_module.os, "write", real_write)
        assert spool.write_now(b"next") is None  # the event loop is not held up again right away
        spool._inline_after = 0.0
        assert _written_inline(spool, b"later") is True
