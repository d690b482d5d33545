"""The background writer: spool -> ATDP events -> governor -> store -> checkpoint, in batches.

A call without a session, the common record, skips the events: it goes as its run's documents (`call_documents`,
`Governor.govern_documents`, `Store.apply_runs`), which store the same rows at less CPU; whatever that path cannot
take is made into events in the same batch.

By default it runs in its own (forked, lower-priority) process: conversion, governance (redaction is
CPU-heavy) and database writes then never compete with the request path for the GIL, and under CPU
pressure the OS serves requests first while the spool absorbs the backlog on disk. `writer_mode:
thread` keeps it in the proxy process instead. Either way all coordination goes through files (the
checkpoint, a lock for purges), so the two modes behave the same.

A batch is applied in one store transaction; the checkpoint moves only after the commit, so a crash
replays at most one batch, and the store ignores replayed events by id. Failures (database down,
governor error) are retried with backoff; nothing is skipped and nothing is stored ungoverned.
Nothing here reads the store back: the governor gets each trajectory's run from the records.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import logging
import multiprocessing
import os
import select
import signal
import threading
import time
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from evolvable.protocol.models import Event, VersionsNamed, utcnow
from evolvable.proxy.call_documents import call_documents
from evolvable.proxy.capture import Converter
from evolvable.proxy.deadletter import DEFAULT_MAX_AGE_S, DeadLetter
from evolvable.proxy.hooks import DocumentGovernor, Governor
from evolvable.proxy.records import AnyRecord, CallRecord, EndRecord
from evolvable.proxy.records import decode as decode_record
from evolvable.proxy.sessions import SessionManager
from evolvable.proxy.spool import SpoolReader
from evolvable.store import RunDocuments, Store
from evolvable.telemetry.metrics import flush_writer_snapshot

log = logging.getLogger("evolvable.proxy.writer")


class Waker:
    """Cuts the writer's sleep short: a pipe it waits on between batches, so a reader who needs its records in
    the store now (read-your-writes, shutdown) does not wait out `idle_s`. Made before the fork: the proxy
    process wakes a forked writer through it as well as a thread. Request paths never call it (one syscall
    per call); they rely on `idle_s`."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)
        weakref.finalize(self, _close_all, self._read, self._write)

    def wake(self) -> None:
        with contextlib.suppress(OSError):  # (a full pipe: a wake-up is pending anyway)
            os.write(self._write, b"\0")

    def sleep(self, seconds: float) -> None:
        """Up to `seconds`, less when woken; pending wake-ups are consumed. (poll, not select: a busy proxy's
        descriptors can pass select's limit of 1024.)"""
        waiting = select.poll()
        waiting.register(self._read, select.POLLIN)
        if waiting.poll(seconds * 1000.0):
            with contextlib.suppress(BlockingIOError):
                while os.read(self._read, 512):
                    pass


def _close_all(*fds: int) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


@dataclass
class _Item:
    """One spool record on its way to the store: as events, or (`events` None) first as a run's documents."""

    payload: bytes
    record: AnyRecord
    events: list[Event] | None
    documents: RunDocuments | None = None

    def fresh_documents(self) -> RunDocuments | None:
        """The record's run as documents, for one attempt to apply them: governing edits them in place, so a
        retry makes them again from the payload."""
        documents, self.documents = self.documents, None
        return documents if documents is not None else call_documents(decode_record(self.payload))


class _CannotConvert(Exception):
    """A record taken as documents first cannot be made into events either: it is quarantined."""

    def __init__(self, item: _Item, error: Exception) -> None:
        super().__init__(f"cannot convert: {error.__class__.__name__}: {error}")
        self.item = item


class WriterStats:
    """Counters readable from the proxy process whichever process the writer runs in."""

    def __init__(self) -> None:
        ctx = multiprocessing.get_context("fork")
        # (raw shared memory: the lock-free `Value(..., lock=False)` / `Array(..., lock=False)`)
        self._records = ctx.RawValue(ctypes.c_longlong, 0)
        self._events = ctx.RawValue(ctypes.c_longlong, 0)
        self._failures = ctx.RawValue(ctypes.c_longlong, 0)
        self._quarantined = ctx.RawValue(ctypes.c_longlong, 0)
        self._error = ctx.RawArray(ctypes.c_char, 512)
        self._quarantine_error = ctx.RawArray(ctypes.c_char, 512)
        self._quarantine_tenant = ctx.RawArray(ctypes.c_char, 256)

    def applied(self, records: int, events: int) -> None:
        self._records.value += records
        self._events.value += events

    def quarantined(self, error: str, tenant_id: str | None) -> None:
        """A record moved to the dead-letter queue; its error stays visible (to its tenant) until the next."""
        self._quarantined.value += 1
        self._quarantine_error.value = error.encode("utf-8", "replace")[:511]
        self._quarantine_tenant.value = (tenant_id or "").encode("utf-8", "replace")[:255]

    def failed(self, error: str | None) -> None:
        """The error the writer is retrying on (None: it succeeded again)."""
        if error is not None:
            self._failures.value += 1
        self._error.value = (error or "").encode("utf-8", "replace")[:511]

    def as_dict(self, viewer_tenant: str | None = None, *, operator: bool = True) -> dict[str, Any]:
        """The counters. Error texts can quote a record or SQL parameters, so a non-operator sees the
        quarantine error only for its own tenant's record, and of a retry error only its kind."""
        error = self._error.value.decode("utf-8", "replace") or None
        quarantine = self._quarantine_error.value.decode("utf-8", "replace") or None
        tenant = self._quarantine_tenant.value.decode("utf-8", "replace") or None
        if not operator:
            error = error.split(":", 1)[0] if error else None
            if quarantine is not None and (tenant is None or tenant != viewer_tenant):
                quarantine = "a record of another tenant was quarantined"
        return {
            "records_applied": self._records.value,
            "events_applied": self._events.value,
            "writer_failures": self._failures.value,
            "writer_last_error": error,
            "records_quarantined": self._quarantined.value,
            "last_quarantine_error": quarantine,
        }


class BackgroundWriter:
    def __init__(
        self,
        reader: SpoolReader,
        store: Store,
        governor: Governor,
        sessions: SessionManager,
        stats: WriterStats,
        *,
        batch_size: int = 256,
        idle_s: float = 0.02,
        deadletter_max_age_s: float = DEFAULT_MAX_AGE_S,
        documents: bool = True,
    ) -> None:
        """`documents`: apply calls without a session as documents (`call_documents`) where the governor can govern
        them so (a `DocumentGovernor`); False makes events of every record."""
        self.reader, self.store, self.governor, self.sessions = reader, store, governor, sessions
        self.document_governor = governor if documents and isinstance(governor, DocumentGovernor) else None
        self.stats = stats
        self.batch_size, self.idle_s = batch_size, idle_s
        self.converter = Converter()
        self.waker = Waker()
        self.deadletter = DeadLetter(reader.directory, max_age_s=deadletter_max_age_s)
        self.poison_retry_delays_s: tuple[float, ...] = (0.05, 0.5)
        self.pause_gc = False
        """Keep the cyclic GC off while a batch is applied (set in the forked writer process, see `_batch_gc`)."""

    def drain(self) -> int:
        """Apply everything now in the spool, synchronously (startup recovery, tests, CLI)."""
        total = 0
        while True:
            n = self.cycle()
            total += n
            if n == 0:
                return total

    def run(self, should_stop: Any) -> None:
        """Apply until `should_stop()` and the spool is drained (or the writer keeps failing)."""
        backoff, idle = 0.05, self.idle_s
        while True:
            try:
                self.deadletter.expire_due()
                with _batch_gc(self.pause_gc):
                    n = self.cycle()
                backoff = 0.05
                self.stats.failed(None)
            except Exception as err:  # keep the data in the spool; retry
                self.stats.failed(f"{err.__class__.__name__}: {err}")
                log.exception("background writer failed; retrying in %.2fs", backoff)
                if should_stop():
                    return
                time.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            if n >= self.batch_size:
                idle = self.idle_s
                continue  # a backlog: keep going
            if n:
                idle = self.idle_s  # a trickle: let a batch gather (fewer transactions, less CPU per record)
            else:
                flush_writer_snapshot()  # idle: the metrics of the last batches, rate-limited while busy
                if should_stop():
                    return
            self.waker.sleep(idle)
            if not n:
                idle = min(idle * 1.5, 0.1)

    def cycle(self) -> int:
        with self.reader.cycle_lock():
            start = self.reader.load_checkpoint()
            payloads, nxt = self.reader.read(start, self.batch_size)
            if not payloads:
                if nxt != start:
                    self.reader.save_checkpoint(nxt)
                return 0
            self.apply_batch(payloads)
            self.reader.save_checkpoint(nxt)
            return len(payloads)

    def apply_batch(self, payloads: list[bytes]) -> None:
        """Apply spool records (what `cycle` read): a record that cannot be decoded or converted is quarantined."""
        items: list[_Item] = []
        for payload in payloads:
            try:
                rec = decode_record(payload)
                documents = call_documents(rec) if self.document_governor is not None else None
                items.append(_Item(payload, rec, None if documents is not None else self._events_of(rec), documents))
            except Exception as err:  # a record no fix of the store can apply: quarantined, counted
                self._quarantine(payload, f"cannot convert: {err.__class__.__name__}: {err}")
        self._apply(items)

    def _apply(self, items: list[_Item]) -> None:
        """Apply items in one transaction; if that fails while the store is healthy, bisect down to the
        records that fail on their own and quarantine those, so one bad record never blocks the rest."""
        if not items:
            return
        try:
            self._apply_together(items)
            return
        except _CannotConvert as err:
            self._quarantine(err.item.payload, str(err))
            self._apply([item for item in items if item is not err.item])
            return
        except Exception as err:
            if not self._store_healthy():
                raise  # the database is down: keep everything spooled and retry
            if len(items) == 1:
                self._retry_or_quarantine(items[0], err)
                return
        middle = len(items) // 2
        self._apply(items[:middle])
        self._apply(items[middle:])

    def _apply_together(self, items: list[_Item]) -> None:
        stored_as_documents = self._apply_documents([item for item in items if item.events is None])
        as_events = [item for item in items if item.events is not None]
        governed: list[Event] = []
        if as_events:
            events = [e for item in as_events for e in item.events or ()]
            runs = {item.record.trajectory_id: run for item in as_events if (run := item.record.run()) is not None}
            governed = self.governor.govern(events, runs)
            self.store.apply_events(governed)
        self._after_apply([item.record for item in items])
        self.stats.applied(len(items), len(governed) + stored_as_documents)

    def _apply_documents(self, items: list[_Item]) -> int:
        """Govern and store the items' runs as documents, in their own transaction (both paths are idempotent, so
        a crash between the two replays cleanly); each item neither takes is made into events for the rest of
        the batch. Returns how many events the stored documents stand for."""
        if not items:
            return 0
        runs = [item.fresh_documents() for item in items]
        given = [run for run in runs if run is not None]
        assert self.document_governor is not None  # (items wait as documents only when there is one)
        governed = self.document_governor.govern_documents(given)
        if len(governed) != len(given):  # (a run misattributed to another record would be worse than a retry)
            raise RuntimeError(f"the governor returned {len(governed)} runs for {len(given)}")
        by_run = iter(governed)
        ready = [(item, next(by_run) if run is not None else None) for item, run in zip(items, runs, strict=True)]
        left = {id(run) for run in self.store.apply_runs([run for _, run in ready if run is not None])}
        stored = 0
        for item, run in ready:
            if run is None or id(run) in left:
                try:
                    item.events = self._events_of(item.record)
                except Exception as err:
                    raise _CannotConvert(item, err) from err
            else:
                stored += 1 + len(run.steps)  # (its start and steps)
        return stored

    def _events_of(self, rec: AnyRecord) -> list[Event]:
        return self.converter.convert(rec) + _versions_named(rec)

    def _retry_or_quarantine(self, item: _Item, first_error: Exception) -> None:
        """A record that failed alone: retried (a passing lock or hiccup), then quarantined."""
        error = first_error
        for delay in self.poison_retry_delays_s:
            time.sleep(delay)
            try:
                self._apply_together([item])
                return
            except Exception as err:
                if not self._store_healthy():
                    raise
                error = err
        self._quarantine(item.payload, f"{error.__class__.__name__}: {error}")

    def _quarantine(self, payload: bytes, error: str) -> None:
        entry = self.deadletter.add(payload, error)
        self.stats.quarantined(error, entry.tenant_id)
        log.error(
            "quarantined a spool record (%s of tenant %s, %d bytes) as %s: %s",
            entry.kind,
            entry.tenant_id,
            entry.size,
            entry.id,
            error[:300],
        )

    def _store_healthy(self) -> bool:
        return self.store.healthy()

    def _after_apply(self, records: list[AnyRecord]) -> None:
        """Session bookkeeping that is not an ATDP event: ended sessions, versions learned at the first call."""
        ended: dict[str, list[str]] = {}
        for rec in records:
            if isinstance(rec, EndRecord) and rec.session_id:
                ended.setdefault(rec.status, []).append(rec.trajectory_id)
            if isinstance(rec, CallRecord) and rec.first_versions and rec.session_id:
                self.sessions.record_versions(rec.trajectory_id, rec.harness_version, rec.policy_version)
        for status, ids in ended.items():
            self.sessions.mark_ended(ids, status, utcnow())


@contextlib.contextmanager
def _batch_gc(pause: bool) -> Iterator[None]:
    """The cyclic GC off for one batch, when `pause`. A batch holds thousands of new containers (decoded records,
    events, rows) until it is applied: each young collection traversed all that were still alive, 5-12% of the
    writer's CPU per call (`benchmarks/writer_gc.py`). None of them is part of a cycle, so reference counting
    frees the batch at its end either way; what cyclic garbage a batch makes waits for the next collection
    after it. Process-wide: only the forked writer, which serves nothing else, sets it."""
    if not pause or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _versions_named(rec: AnyRecord) -> list[Event]:
    """A session's versions, when the rewriter first named them on a call (not at session start): an
    event, so the store applies it in the batch's transaction like every other change to a header."""
    if not isinstance(rec, CallRecord) or not rec.first_versions or not rec.session_id:
        return []
    tid = rec.trajectory_id
    return [
        VersionsNamed(
            event_id=f"{tid}:versions:{rec.request_id}",
            trajectory_id=tid,
            tenant_id=rec.tenant_id,
            harness_version=rec.harness_version,
            policy_version=rec.policy_version,
        )
    ]


class WriterRunner:
    """Runs a BackgroundWriter in a forked child process (default) or a thread, restarts it (with backoff,
    logged) if it dies, and stops it cleanly."""

    def __init__(self, writer: BackgroundWriter, mode: str = "process", nice: int = 10) -> None:
        self.writer, self.mode, self.nice = writer, mode, nice
        self._stop_thread = threading.Event()
        self._thread: threading.Thread | None = None
        self._process: Any = None
        self._stop_process: Any = None
        self._close_in_child: tuple[int, ...] = ()
        self._stopping = threading.Event()
        self._supervisor: threading.Thread | None = None
        self.restarts = 0
        self.check_interval_s = 0.5
        self.max_backoff_s = 30.0

    def start(self, close_in_child: tuple[int, ...] = ()) -> None:
        self._close_in_child = close_in_child
        self._launch()
        self._supervisor = threading.Thread(target=self._supervise, name="evolvable-writer-supervisor", daemon=True)
        self._supervisor.start()

    def _launch(self) -> None:
        if self.mode == "thread":
            self._thread = threading.Thread(
                target=self.writer.run, args=(self._stop_thread.is_set,), name="evolvable-writer", daemon=True
            )
            self._thread.start()
            return
        ctx = multiprocessing.get_context("fork")
        self._stop_process = ctx.Event()
        self._process = ctx.Process(
            target=_child_main,
            args=(self.writer, self._stop_process, os.getpid(), self._close_in_child, self.nice),
            name="evolvable-writer",
            daemon=True,
        )
        self._process.start()

    def _supervise(self) -> None:
        """Restart a writer that died (killed, crashed): capture must not stop silently."""
        backoff = self.check_interval_s
        started = time.monotonic()
        while not self._stopping.wait(self.check_interval_s):
            if self.alive:
                if time.monotonic() - started > 60:
                    backoff = self.check_interval_s  # it has run a while: the next death starts over
                continue
            exitcode = self._process.exitcode if self._process is not None else None
            log.error("background writer died (exit code %s); restarting in %.1fs", exitcode, backoff)
            if self._stopping.wait(backoff):
                return
            if self._process is not None:
                self._process.join(0)
            self.restarts += 1
            self._launch()
            started = time.monotonic()
            backoff = min(backoff * 2, self.max_backoff_s)

    def stop(self, timeout_s: float = 30.0) -> None:
        """Drain what is spooled (bounded by the timeout), then stop."""
        self._stopping.set()
        if self._supervisor is not None:
            self._supervisor.join(timeout_s)
            self._supervisor = None
        if self._thread is not None:
            self._stop_thread.set()
            self.writer.waker.wake()  # a sleeping writer looks at the stop flag now
            self._thread.join(timeout_s)
            self._thread = None
        if self._process is not None:
            self._stop_process.set()
            self.writer.waker.wake()
            self._process.join(timeout_s)
            if self._process.is_alive():
                log.warning("background writer did not finish in %.0fs; the rest stays spooled", timeout_s)
                self._process.terminate()
                self._process.join(5)
            self._process = None

    @property
    def alive(self) -> bool:
        if self._thread is not None:
            return self._thread.is_alive()
        return self._process is not None and self._process.is_alive()

    @property
    def pid(self) -> int | None:
        """The writer process's id (None in thread mode)."""
        return self._process.pid if self._process is not None else None


def _child_main(writer: BackgroundWriter, stop: Any, parent_pid: int, close_fds: tuple[int, ...], nice: int) -> None:
    """The writer process: no inherited locks, connections or signal handlers of the proxy."""
    # The heap inherited from the proxy (~10^5 objects) lives as long as this process: out of the cyclic GC,
    # whose full collections traversed all of it (~140 ms of CPU each, several per minute under load;
    # docs/PERFORMANCE.md). Freezing only relinks the GC's lists: no object, so no shared page, is touched.
    gc.freeze()
    writer.pause_gc = True
    for fd in close_fds:  # e.g. the spool directory lock: it must die with the proxy, not with us
        with contextlib.suppress(OSError):
            os.close(fd)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C: the proxy tells us to drain and stop
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    with contextlib.suppress(ValueError, OSError):
        signal.set_wakeup_fd(-1)
    if nice:
        with contextlib.suppress(OSError):
            os.nice(nice)
    # Never share the parent's pooled connections: drop them (without closing the parent's sockets).
    for holder in (writer.store, getattr(writer.governor, "store", None)):
        if isinstance(holder, Store):
            holder.forget_pooled_connections()
    writer.run(lambda: stop.is_set() or os.getppid() != parent_pid)
    writer.store.close()
