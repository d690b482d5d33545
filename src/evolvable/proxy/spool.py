"""A durable, append-only local spool: the capture path's first stop.

Records are opaque bytes (orjson documents) framed as `<u32 length><u32 crc32><payload>` in numbered
segment files (`000000000001.seg`, ...). On the append side (`Spool`, in the proxy process) one
dedicated thread owns the files and writes whole batches with one `write` and, by policy, one
`fdatasync` (group commit), so the event loop never blocks on disk. The queue in front of it is
bounded: when it is full, callers wait (back-pressure) instead of memory growing without bound.

The read side (`SpoolReader`, used by the background writer, normally in its own process) reads from
a durable checkpoint file and advances it only after the store committed; applied segments are
deleted promptly, because the spool holds content before governance has redacted it. Reader and
purge exclude each other with a file lock, so they work across processes. A torn tail (a crash
mid-write) fails its length or CRC check and is cut off when the spool is opened.

Positions are `(segment, offset)` tuples and compare in spool order.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import queue
import struct
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from evolvable.errors import EvolvableError

log = logging.getLogger("evolvable.proxy.spool")

Position = tuple[int, int]
_FRAME = struct.Struct("<II")
_SUFFIX = ".seg"
_CHECKPOINT = "checkpoint"
_STOP = object()
_ROTATE = object()
_CHECKPOINT_SLOT = struct.Struct("<4sQQQI")
_CHECKPOINT_MAGIC = b"EVCP"
_CHECKPOINT_BYTES = 4096


def _slot_crc(counter: int, seq: int, offset: int) -> int:
    return zlib.crc32(struct.pack("<QQQ", counter, seq, offset))


def _checkpoint_slot(counter: int, position: Position) -> bytes:
    return _CHECKPOINT_SLOT.pack(_CHECKPOINT_MAGIC, counter, position[0], position[1], _slot_crc(counter, *position))


def _slots(data: bytes) -> list[tuple[int, Position]]:
    """Both checkpoint slots as (counter, position); an invalid or torn slot reads as (0, (0, 0))."""
    data = data.ljust(2 * _CHECKPOINT_SLOT.size, b"\0")
    out: list[tuple[int, Position]] = []
    for i in range(2):
        magic, counter, seq, offset, crc = _CHECKPOINT_SLOT.unpack_from(data, i * _CHECKPOINT_SLOT.size)
        valid = magic == _CHECKPOINT_MAGIC and crc == _slot_crc(counter, seq, offset)
        out.append((counter, (seq, offset)) if valid else (0, (0, 0)))
    return out


def _text_checkpoint(data: bytes, path: Path) -> Position:
    try:
        seq, offset = data.decode().split()
        return (int(seq), int(offset))
    except ValueError:
        log.warning("spool checkpoint %s is unreadable; replaying the whole spool", path)
        return (0, 0)


class SpoolError(EvolvableError):
    """The spool cannot be opened, written or purged."""


class SpoolFull(SpoolError):
    """The spool queue stayed full for longer than the back-pressure timeout."""


def frame(payload: bytes) -> bytes:
    return _FRAME.pack(len(payload), zlib.crc32(payload)) + payload


def segment_path(directory: Path, seq: int) -> Path:
    return directory / f"{seq:012d}{_SUFFIX}"


def _scan(data: bytes | memoryview, start: int = 0) -> Iterator[tuple[bytes, int]]:
    """Valid records from `start`, each with the offset just past it; stops at a torn or corrupt frame."""
    pos, end = start, len(data)
    while pos + _FRAME.size <= end:
        length, crc = _FRAME.unpack_from(data, pos)
        body_start = pos + _FRAME.size
        if body_start + length > end:
            return
        payload = bytes(data[body_start : body_start + length])
        if zlib.crc32(payload) != crc:
            return
        pos = body_start + length
        yield payload, pos


def _scanned_length(data: bytes) -> int:
    """Bytes of `data` covered by valid frames (where a torn or corrupt tail starts)."""
    valid = 0
    for _payload, after in _scan(data):
        valid = after
    return valid


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def list_segments(directory: Path) -> list[int]:
    """The segments' sequence numbers, in order. Read twice per writer cycle: `os.scandir` with a suffix test,
    not `Path.glob`, whose pattern machinery cost about as much as one of the cycle's SQL statements."""
    out: list[int] = []
    try:
        entries = os.scandir(directory)
    except FileNotFoundError:  # (as `glob` did: no directory, no segments)
        return out
    with entries:
        for entry in entries:
            name = entry.name
            if name.endswith(_SUFFIX):
                with contextlib.suppress(ValueError):
                    out.append(int(name[: -len(_SUFFIX)]))
    return sorted(out)


# --------------------------------------------------------------------------- read side


class SpoolReader:
    """Reads a spool directory from its checkpoint. Process-independent: all state is in files."""

    read_chunk_bytes = 1 << 20
    """How much of a segment one read takes (records are a few kB; a bigger one spans reads)."""
    min_first_read_bytes = 64 << 10
    """The least a batch's first read takes (see `_first_read`)."""

    def __init__(self, directory: Path, *, fsync: bool = True) -> None:
        self.directory = Path(directory)
        self.fsync = fsync
        self._frame_bytes = 0.0
        """A running mean of the frames read so far: how much a batch's first read takes (a hint, not state)."""

    @contextlib.contextmanager
    def cycle_lock(self) -> Iterator[None]:
        """Held for one read -> store -> checkpoint cycle, and by purge (across processes)."""
        fd = os.open(self.directory / "reader.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def load_checkpoint(self) -> Position:
        path = self.directory / _CHECKPOINT
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return (0, 0)
        if data[:1].isdigit():  # the text format of earlier versions
            return _text_checkpoint(data, path)
        counter, position = max(_slots(data))
        if not counter:
            # Only a power cut can damage both slots. Replaying every segment still on disk is safe:
            # the store ignores events it has already applied.
            log.warning("spool checkpoint %s is unreadable; replaying the whole spool", path)
        return position

    def reserve_checkpoint(self) -> None:
        """Create the checkpoint file at its full size now, so a full disk can never stop it moving.

        It is then rewritten in place (two alternating checksummed slots), which needs no new blocks."""
        path = self.directory / _CHECKPOINT
        position = self.load_checkpoint()
        if path.exists() and path.stat().st_size >= _CHECKPOINT_BYTES and path.read_bytes()[:4] == _CHECKPOINT_MAGIC:
            return
        tmp = self.directory / (_CHECKPOINT + ".tmp")
        with open(tmp, "wb") as f:
            f.write(_checkpoint_slot(1, position).ljust(_CHECKPOINT_BYTES, b"\0"))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)

    def save_checkpoint(self, position: Position) -> None:
        """Record that everything before `position` is in the store; delete applied segments.

        Written in place into the reserved file (no allocation, so it works on a full disk), into the
        older of two checksummed slots: a torn write leaves the other one valid. Not fsynced: losing
        it in a power cut only means replaying records the store already has, which it ignores by id."""
        path = self.directory / _CHECKPOINT
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            counters = [n for n, _position in _slots(os.pread(fd, 2 * _CHECKPOINT_SLOT.size, 0))]
            slot = 0 if counters[0] <= counters[1] else 1
            os.pwrite(fd, _checkpoint_slot(max(counters) + 1, position), slot * _CHECKPOINT_SLOT.size)
        finally:
            os.close(fd)
        for seq in list_segments(self.directory):
            if seq < position[0]:
                segment_path(self.directory, seq).unlink(missing_ok=True)

    def read(self, start: Position, max_records: int) -> tuple[list[bytes], Position]:
        """Up to `max_records` complete records after `start`, and the position after them.

        In the newest segment an incomplete frame may be a write in progress: reading stops there.
        In an older (closed) segment it is corruption: logged, and the rest of that segment skipped.
        """
        records: list[bytes] = []
        seq, offset = start
        segments = [s for s in list_segments(self.directory) if s >= seq]
        while len(records) < max_records and segments:
            if seq < segments[0]:
                seq, offset = segments[0], 0
            newest = seq == segments[-1]
            offset, leftover = self._read_segment(seq, offset, max_records, records)
            if len(records) >= max_records:
                return records, (seq, offset)
            if newest:
                break
            if leftover:
                log.error("spool segment %s is corrupt at offset %d; skipping its remainder", seq, offset)
            segments.pop(0)
            if segments:
                seq, offset = segments[0], 0
        return records, (seq, offset)

    def _read_segment(self, seq: int, offset: int, max_records: int, records: list[bytes]) -> tuple[int, bool]:
        """Appends the valid records of segment `seq` from `offset` to `records`, until it holds `max_records`;
        returns the offset just past the last one appended and whether bytes that are no whole valid frame
        were left at the end (a write in progress, or a torn or corrupt frame).

        Read in chunks of `read_chunk_bytes`, as far as the records wanted need: reading the whole rest of the
        segment for every batch copied up to a 16 MB segment per batch while the writer caught up on a
        backlog."""
        try:
            with open(segment_path(self.directory, seq), "rb") as f:
                f.seek(offset)
                return self._read_records(f, offset, max_records, records)
        except FileNotFoundError:
            return offset, False

    def _read_records(self, f: BinaryIO, offset: int, max_records: int, records: list[bytes]) -> tuple[int, bool]:
        first_count = len(records)
        end, leftover = self._read_frames(f, offset, max_records, records)
        if count := len(records) - first_count:
            sample = (end - offset) / count  # (the frames taken: `end` is just past the last)
            self._frame_bytes = sample if not self._frame_bytes else 0.8 * self._frame_bytes + 0.2 * sample
        return end, leftover

    def _first_read(self, wanted: int) -> int:
        """A batch's first read: about what `wanted` records of the usual size take, not a whole chunk. A writer
        that keeps up reads a few records per cycle; copying a 1 MB chunk for them cost more than they did."""
        if not self._frame_bytes:
            return self.read_chunk_bytes
        guess = int(wanted * self._frame_bytes * 1.25)
        return min(self.read_chunk_bytes, max(self.min_first_read_bytes, guess))

    def _read_frames(self, f: BinaryIO, offset: int, max_records: int, records: list[bytes]) -> tuple[int, bool]:
        pending = b""  # read, but no whole valid frame: the start of one cut by the read's end, or a corrupt one
        want = self._first_read(max_records - len(records))
        while True:
            if len(pending) >= _FRAME.size:
                length, _crc = _FRAME.unpack_from(pending)
                if _FRAME.size + length <= len(pending):
                    return offset, True  # a whole frame that failed its checksum
                want = max(want, _FRAME.size + length - len(pending))  # the rest of a long one in one read
            chunk = f.read(want)
            data = pending + chunk if pending else chunk
            scanned = 0
            for payload, scanned in _scan(data):
                records.append(payload)
                if len(records) >= max_records:
                    return offset + scanned, False
            offset += scanned
            pending = data[scanned:]
            if len(chunk) < want:  # the end of the file
                return offset, bool(pending)
            want = self.read_chunk_bytes


# --------------------------------------------------------------------------- append side


class Spool:
    """Durable append-only record log with a bounded write queue (the proxy process's side)."""

    def __init__(
        self,
        directory: Path,
        *,
        fsync: str = "batch",
        fsync_interval_s: float = 0.05,
        queue_size: int = 4096,
        segment_bytes: int = 16 * 1024 * 1024,
        rotate_idle_s: float = 1.0,
        max_segment_age_s: float = 5.0,
    ) -> None:
        self.directory = Path(directory)
        self.fsync = fsync
        self.fsync_interval_s = fsync_interval_s
        self.segment_bytes = segment_bytes
        self.rotate_idle_s = min(rotate_idle_s, max_segment_age_s)
        self.max_segment_age_s = max_segment_age_s
        self.reader = SpoolReader(self.directory, fsync=fsync != "none")
        self._queue: queue.Queue[object] = queue.Queue(maxsize=queue_size)
        self._cond = threading.Condition()
        self._file_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.lock_fd: int | None = None
        self._fd: int | None = None
        self._active_seq = 0
        self._active_size = 0
        self._end: Position = (0, 0)
        self._enqueued = 0
        self._written = 0
        self._syncer: _Syncer | None = None
        self._opened_at = 0.0
        self._last_write = 0.0
        self._inline_after = 0.0
        self.slow_write_s = 0.01
        """An inline write (`write_now`) slower than this (a disk stall, well above a scheduling delay) sends
        records through the spool thread for a second."""
        self.last_error: str | None = None
        self.dropped = 0
        """Records handed to the spool that could not be written (disk full, I/O error); never silent."""
        self._last_failure_log = float("-inf")
        self._last_probe = float("-inf")
        self.failing = False
        """True while writes fail (from the first failed batch until one succeeds again)."""
        self._handled = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiters: dict[int, asyncio.Future[bool]] = {}

    # ------------------------------------------------------------------ lifecycle

    def open(self) -> Spool:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.lock_fd = _acquire_dir_lock(self.directory)
        checkpoint = self.reader.load_checkpoint()
        segments = list_segments(self.directory)
        for seq in segments:
            if seq < checkpoint[0]:
                segment_path(self.directory, seq).unlink(missing_ok=True)
        segments = [s for s in segments if s >= checkpoint[0]]
        if segments:
            self._truncate_torn_tail(segments[-1])
        self.reader.reserve_checkpoint()
        if self.fsync == "interval":
            self._syncer = _Syncer(self, self.fsync_interval_s)
        self._open_segment(max([*segments, checkpoint[0]]) + 1)
        self._end = (self._active_seq, self._active_size)
        self._thread = threading.Thread(target=self._run, name="evolvable-spool", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Write everything queued, then stop. Safe to call twice."""
        if self._thread is not None:
            self._queue.put(_STOP)
            self._thread.join()
            self._thread = None
        if self._syncer is not None:
            self._syncer.stop()
            self._syncer = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self.lock_fd is not None:
            os.close(self.lock_fd)
            self.lock_fd = None

    def __enter__(self) -> Spool:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ appending

    def append_nowait(self, payload: bytes) -> bool:
        """Queue a record; False when the queue is full (the caller decides how to wait)."""
        try:
            self._queue.put_nowait(payload)
        except queue.Full:
            return False
        self._enqueued += 1
        return True

    async def append(self, payload: bytes, timeout_s: float = 30.0) -> int:
        """Queue a record from the event loop; waits (without blocking the loop) while the queue is full.
        Returns the record's sequence number (see `written`)."""
        if self.append_nowait(payload):
            return self._enqueued
        deadline = time.monotonic() + timeout_s
        delay = 0.0005
        while not self.append_nowait(payload):
            if time.monotonic() > deadline:
                raise SpoolFull(f"spool queue full for {timeout_s}s; the background writer is not keeping up")
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.05)
        return self._enqueued

    async def append_durable(self, payload: bytes, timeout_s: float = 30.0) -> bool:
        """Queue a record and wait until it is in the segment file (survives kill -9 of this process).

        False when the write failed (the record is counted in `dropped`). One wake-up per written batch;
        none when nothing else is queued or being written: then the record is written here (`write_now`)."""
        written = self.write_now(payload)
        if written is not None:
            return written
        self._loop = asyncio.get_running_loop()  # before queueing: the spool thread must find the loop
        seq = await self.append(payload, timeout_s)
        # Registered before this coroutine yields: the spool thread's wake-up runs on this loop after it.
        waiter = self._loop.create_future()
        self._waiters[seq] = waiter
        try:
            return await asyncio.wait_for(waiter, timeout_s)
        except TimeoutError:
            self._waiters.pop(seq, None)
            return False

    def write_now(self, payload: bytes) -> bool | None:
        """Write one record from the calling thread (the event loop) when no other record is queued or
        being written; None when that is not so (the caller queues it instead).

        A lone record then costs one `write` into the page cache instead of two thread hand-offs (wake
        the spool thread, which wakes the loop back): at low concurrency those wake-ups, each a chance
        to wait for a core, were most of the capture path's latency and CPU (docs/PERFORMANCE.md). What
        can wait on the disk stays in threads: `fsync: batch` always goes through the spool thread, and
        `interval` syncs are the syncer's. Order is kept: nothing queued earlier is overtaken. Rotation
        (an aged or full segment) and a failing disk's probes are left to the spool thread, and so is every
        record for a second after a `write` took longer than `slow_write_s` (a disk under pressure must not
        hold up the event loop)."""
        if self.fsync == "batch" or self.failing or self._enqueued != self._handled or self._thread is None:
            return None
        now = time.monotonic()
        if now < self._inline_after or not self._file_lock.acquire(blocking=False):
            return None
        try:
            if (
                self._enqueued != self._handled
                or self._fd is None
                or self._active_size >= self.segment_bytes
                or now - self._opened_at >= self.max_segment_age_s
            ):
                return None
            ok = True
            try:
                self._append_frames(frame(payload))
            except OSError as err:
                ok = False
                self._record_failure(err, 1)
            self._last_write = time.monotonic()
            if self._last_write - now > self.slow_write_s:
                self._inline_after = self._last_write + 1.0
            self._enqueued += 1
            self._publish(1, (self._active_seq, self._active_size))
            return ok
        finally:
            self._file_lock.release()

    def may_try_write(self, probe_interval_s: float = 0.5) -> bool:
        """False while writes fail, except once per `probe_interval_s` (a probe: does writing work again?)."""
        if not self.failing:
            return True
        now = time.monotonic()
        if now - self._last_probe >= probe_interval_s:
            self._last_probe = now
            return True
        return False

    def _settle(self, first: int, last: int, ok: bool) -> None:
        """On the event loop: wake the waiters of records first..last (just written, or failed)."""
        for seq in range(first, last + 1):
            waiter = self._waiters.pop(seq, None)
            if waiter is not None and not waiter.done():
                waiter.set_result(ok)

    def rotate(self) -> None:
        """Start a new segment (so the applied one can be deleted)."""
        with contextlib.suppress(queue.Full):
            self._queue.put_nowait(_ROTATE)

    @property
    def enqueued(self) -> int:
        return self._enqueued

    @property
    def end(self) -> Position:
        """Position just past the last record written to the files."""
        with self._cond:
            return self._end

    def wait_written(self, count: int, timeout_s: float) -> Position | None:
        """Block until `count` records were written; the end position then, or None on timeout."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._written < count:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self._cond.wait(remaining)
            return self._end

    def wait_applied(self, position: Position, timeout_s: float, poll_s: float = 0.002) -> bool:
        """Block until the reader's checkpoint reached `position` (in any process)."""
        deadline = time.monotonic() + timeout_s
        while self.reader.load_checkpoint() < position:
            if time.monotonic() > deadline:
                return False
            time.sleep(poll_s)
            poll_s = min(poll_s * 1.5, 0.05)
        return True

    def _run(self) -> None:
        stopping = False
        while not stopping:
            try:
                item = self._queue.get(timeout=self.rotate_idle_s)
            except queue.Empty:
                if time.monotonic() - self._last_write < self.rotate_idle_s:
                    continue  # records are being written by `write_now`: not idle
                item = _ROTATE  # idle: close the segment so applied content leaves the disk soon
            batch: list[bytes] = []
            rotate = False
            while True:
                if item is _STOP:
                    stopping = True
                elif item is _ROTATE:
                    rotate = True
                else:
                    batch.append(item)  # type: ignore[arg-type]
                if stopping or len(batch) >= 1024:
                    break
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
            self._write_batch(batch, rotate)

    def _write_batch(self, batch: list[bytes], rotate: bool) -> None:
        """Write one batch; a failure (disk full, read-only, I/O error) drops the whole batch, counted and
        reported, and leaves the files as before it, so the next batch can succeed.

        Waiting callers are woken as soon as the batch is in the file (after its fdatasync with
        `fsync: batch`), before any periodic fsync or segment rotation, which only bound power-loss
        exposure and the age of raw data on disk."""
        ok = True
        with self._file_lock:
            if batch:
                try:
                    self._last_write = time.monotonic()
                    self._append_frames(b"".join([frame(p) for p in batch]))
                    if self.fsync == "batch":
                        os.fdatasync(self._fd)  # type: ignore[arg-type]
                except OSError as err:
                    ok = False
                    self._record_failure(err, len(batch))
            end = (self._active_seq, self._active_size)
        self._settle_batch(len(batch), ok, end)
        with self._file_lock:
            try:
                now = time.monotonic()
                aged = now - self._opened_at >= self.max_segment_age_s
                if (
                    self._fd is not None
                    and self._active_size > 0
                    and (rotate or aged or self._active_size >= self.segment_bytes)
                ):
                    self._open_segment(self._active_seq + 1)
            except OSError as err:  # the next batch retries opening a segment
                self._record_failure(err, 0)
            end = (self._active_seq, self._active_size)
        with self._cond:
            self._end = end

    def _settle_batch(self, records: int, ok: bool, end: Position) -> None:
        """Publish a written (or failed) batch: counters, `wait_written`, and the event loop's waiters."""
        if ok and records and self.failing:
            log.warning("spool writes succeed again after %d dropped records", self.dropped)
            self.failing = False
        first = self._handled + 1
        self._publish(records, end)
        loop = self._loop
        if records and loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed in between
                loop.call_soon_threadsafe(self._settle, first, self._handled, ok)

    def _publish(self, records: int, end: Position) -> None:
        """Count `records` as handled (written, or dropped and counted) up to `end`, for `wait_written`."""
        with self._cond:
            self._end = end
            self._written += records
            self._handled += records
            self._cond.notify_all()

    def _append_frames(self, data: bytes) -> None:
        if self._fd is None:  # a segment could not be opened earlier (e.g. a read-only moment): try again
            self._open_segment(self._active_seq + 1)
        assert self._fd is not None
        view = memoryview(data)
        try:
            while view:
                n = os.write(self._fd, view)
                view = view[n:]
        except OSError:
            self._cut_back()
            raise
        self._active_size += len(data)

    def _cut_back(self) -> None:
        """Remove a partly written batch (truncating needs no space); if even that fails, leave the
        segment (its torn tail is skipped by the reader) and write the next batch to a new one."""
        assert self._fd is not None
        try:
            os.ftruncate(self._fd, self._active_size)
        except OSError:
            fd, self._fd = self._fd, None
            with contextlib.suppress(OSError):
                os.close(fd)

    def _record_failure(self, err: OSError, records: int) -> None:
        self.dropped += records
        self.failing = self.failing or records > 0
        self.last_error = f"{err.__class__.__name__}: {err}"
        now = time.monotonic()
        if now - self._last_failure_log >= 1.0:  # loud, but at most once a second on a full disk
            self._last_failure_log = now
            log.error("spool write failed (%s); %d records not written, %d dropped so far", err, records, self.dropped)

    def _open_segment(self, seq: int) -> None:
        """Close the active segment (synced) and start `seq`. With `fsync: interval` the syncs are the
        syncer thread's: this thread writes the records callers wait for and must not wait on the disk."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            if self._syncer is not None:
                self._syncer.close_later(fd)
            else:
                try:
                    if self.fsync != "none":
                        os.fdatasync(fd)
                finally:
                    os.close(fd)
        self._fd = os.open(segment_path(self.directory, seq), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._active_seq, self._active_size = seq, os.fstat(self._fd).st_size
        self._opened_at = time.monotonic()
        if self._syncer is not None:
            self._syncer.sync_directory_later()
        elif self.fsync != "none":
            _fsync_dir(self.directory)

    def _dup_active(self) -> int | None:
        """A duplicate of the active segment's descriptor (the syncer's own: rotation may close the original)."""
        with self._file_lock:
            return os.dup(self._fd) if self._fd is not None else None

    def _truncate_torn_tail(self, seq: int) -> None:
        path = segment_path(self.directory, seq)
        data = path.read_bytes()
        valid = _scanned_length(data)
        if valid < len(data):
            log.warning("spool segment %s: cutting a torn tail of %d bytes", path.name, len(data) - valid)
            with open(path, "r+b") as f:
                f.truncate(valid)
                os.fsync(f.fileno())

    # ------------------------------------------------------------------ purge (governance)

    def purge(self, predicate: Callable[[bytes], bool]) -> int:
        """Remove every spooled record for which `predicate(payload)` is true; returns how many.

        Covers records not yet stored and applied ones still on disk; records still in the in-memory
        queue are written first, then purged. Crash-safe: survivors are written to a new segment before
        the checkpoint moves to it; a crash in between replays survivors, which the store ignores by
        event id. Excludes the background writer (in any process) while it runs.
        """
        self.wait_written(self._enqueued, timeout_s=60.0)
        with self.reader.cycle_lock(), self._file_lock:
            checkpoint = self.reader.load_checkpoint()
            old = [s for s in list_segments(self.directory) if s >= checkpoint[0]]
            target = self._active_seq + 1
            self._open_segment(target + 1)  # new records go after the rewritten ones
            removed, survivors = 0, []
            for seq in old:
                data = segment_path(self.directory, seq).read_bytes()
                start = checkpoint[1] if seq == checkpoint[0] else 0
                for payload, _ in _scan(data, start):
                    if predicate(payload):
                        removed += 1
                    else:
                        survivors.append(payload)
            tmp = self.directory / "purge.tmp"
            with open(tmp, "wb") as f:
                f.write(b"".join(frame(p) for p in survivors))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, segment_path(self.directory, target))
            _fsync_dir(self.directory)
            self.reader.save_checkpoint((target, 0))
            with self._cond:
                self._end = (self._active_seq, self._active_size)
        return removed


class _Syncer:
    """`fsync: interval` in a thread of its own: every `interval_s` it fdatasyncs the active segment,
    and it syncs and closes segments that rotation retired, and the directory after a new one.

    In the writing thread these syncs stalled every record queued behind them, and with
    `reply_after_spooled` every call waiting for its record: the c=1 p99 (docs/PERFORMANCE.md, capture
    section). A sync does not need the file lock (fdatasync on a descriptor another thread writes is safe),
    so writes go on while the disk flushes."""

    def __init__(self, spool: Spool, interval_s: float) -> None:
        self.spool, self.interval_s = spool, interval_s
        self._retired: list[int] = []
        self._sync_dir = False
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="evolvable-spool-sync", daemon=True)
        self._thread.start()

    def close_later(self, fd: int) -> None:
        with self._lock:
            self._retired.append(fd)

    def sync_directory_later(self) -> None:
        with self._lock:
            self._sync_dir = True

    def stop(self) -> None:
        """Sync what is pending one last time, then stop."""
        self._stopping.set()
        self._thread.join()

    def _run(self) -> None:
        while True:
            stopping = self._stopping.wait(self.interval_s)
            self._sync_once()
            if stopping:
                return

    def _sync_once(self) -> None:
        with self._lock:
            retired, self._retired = self._retired, []
            sync_dir, self._sync_dir = self._sync_dir, False
        active = self.spool._dup_active()
        for fd in [*retired, *([active] if active is not None else [])]:
            try:
                os.fdatasync(fd)
            except OSError as err:  # reported like a failed write; the next interval tries again
                self.spool._record_failure(err, 0)
            finally:
                os.close(fd)
        if sync_dir:
            try:
                _fsync_dir(self.spool.directory)
            except OSError as err:
                self.spool._record_failure(err, 0)


def _acquire_dir_lock(directory: Path) -> int:
    fd = os.open(directory / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise SpoolError(f"spool {directory} is in use by another process (a running proxy?)") from None
    return fd


def purge_spool(directory: Path, predicate: Callable[[bytes], bool]) -> int:
    """Purge a spool no proxy is running on (offline `evolvable purge`). A running proxy holds the
    spool's lock; purge through it instead (`app.state.proxy.purge_spool(...)`)."""
    spool = Spool(directory, queue_size=1)
    spool.open()
    try:
        return spool.purge(predicate)
    finally:
        spool.close()
