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

from evolvable.errors import EvolvableError

log = logging.getLogger("evolvable.proxy.spool")

Position = tuple[int, int]
_FRAME = struct.Struct("<II")
_SUFFIX = ".seg"
_CHECKPOINT = "checkpoint"
_STOP = object()
_ROTATE = object()


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
    out = []
    for p in directory.glob(f"*{_SUFFIX}"):
        with contextlib.suppress(ValueError):
            out.append(int(p.name[: -len(_SUFFIX)]))
    return sorted(out)


# --------------------------------------------------------------------------- read side


class SpoolReader:
    """Reads a spool directory from its checkpoint. Process-independent: all state is in files."""

    def __init__(self, directory: Path, *, fsync: bool = True) -> None:
        self.directory = Path(directory)
        self.fsync = fsync

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
            text = path.read_text()
        except FileNotFoundError:
            return (0, 0)
        try:
            seq, offset = text.split()
            return (int(seq), int(offset))
        except ValueError:
            # Only a power cut can leave it damaged (it is replaced by rename). Replaying every segment
            # still on disk is safe: the store ignores events it has already applied.
            log.warning("spool checkpoint %s is unreadable; replaying the whole spool", path)
            return (0, 0)

    def save_checkpoint(self, position: Position) -> None:
        """Record that everything before `position` is in the store; delete applied segments.

        Atomic (rename) but not fsynced: losing it in a power cut only means replaying records the
        store already has, which it ignores by event id."""
        tmp = self.directory / (_CHECKPOINT + ".tmp")
        tmp.write_text(f"{position[0]} {position[1]}\n")
        os.replace(tmp, self.directory / _CHECKPOINT)
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
            try:
                with open(segment_path(self.directory, seq), "rb") as f:
                    f.seek(offset)
                    data = f.read()
            except FileNotFoundError:
                data = b""
            scanned = 0
            for payload, scanned in _scan(data):
                records.append(payload)
                if len(records) >= max_records:
                    return records, (seq, offset + scanned)
            offset += scanned
            if newest:
                break
            if scanned < len(data):
                log.error("spool segment %s is corrupt at offset %d; skipping its remainder", seq, offset)
            segments.pop(0)
            if segments:
                seq, offset = segments[0], 0
        return records, (seq, offset)


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
    ) -> None:
        self.directory = Path(directory)
        self.fsync = fsync
        self.fsync_interval_s = fsync_interval_s
        self.segment_bytes = segment_bytes
        self.rotate_idle_s = rotate_idle_s
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
        self._last_fsync = 0.0
        self.last_error: str | None = None

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

    async def append(self, payload: bytes, timeout_s: float = 30.0) -> None:
        """Queue a record from the event loop; waits (without blocking the loop) while the queue is full."""
        if self.append_nowait(payload):
            return
        deadline = time.monotonic() + timeout_s
        delay = 0.0005
        while not self.append_nowait(payload):
            if time.monotonic() > deadline:
                raise SpoolFull(f"spool queue full for {timeout_s}s; the background writer is not keeping up")
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.05)

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
            try:
                self._write_batch(batch, rotate)
            except Exception as err:  # disk full, I/O error: keep the thread alive, report loudly
                self.last_error = f"{err.__class__.__name__}: {err}"
                log.exception("spool write failed; %d records not written", len(batch))

    def _write_batch(self, batch: list[bytes], rotate: bool) -> None:
        with self._file_lock:
            if batch:
                data = b"".join([frame(p) for p in batch])
                view = memoryview(data)
                assert self._fd is not None
                while view:
                    n = os.write(self._fd, view)
                    view = view[n:]
                self._active_size += len(data)
                now = time.monotonic()
                if self.fsync == "batch" or (
                    self.fsync == "interval" and now - self._last_fsync >= self.fsync_interval_s
                ):
                    os.fdatasync(self._fd)
                    self._last_fsync = now
            if (rotate and self._active_size > 0) or self._active_size >= self.segment_bytes:
                self._open_segment(self._active_seq + 1)
            end = (self._active_seq, self._active_size)
        with self._cond:
            self._end = end
            self._written += len(batch)
            self._cond.notify_all()

    def _open_segment(self, seq: int) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            if self.fsync != "none":
                os.fdatasync(fd)
            os.close(fd)
        self._fd = os.open(segment_path(self.directory, seq), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._active_seq, self._active_size = seq, os.fstat(self._fd).st_size
        if self.fsync != "none":
            _fsync_dir(self.directory)

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
