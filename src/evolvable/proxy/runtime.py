"""The state of one running proxy: spool, writer, sessions, upstream client and the hooks.

Every route and the hot paths reach it as `request.app.state.proxy` (or are handed it); it imports
none of them, so they all depend on it one way.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from evolvable.protocol.models import Step
from evolvable.proxy.config import ProxyConfig
from evolvable.proxy.hooks import (
    Authenticator,
    Governor,
    OpenAuthenticator,
    PassThroughGovernor,
    Principal,
    RequestRewriter,
)
from evolvable.proxy.metrics import observe_capture
from evolvable.proxy.records import CaptureRecord, StepRecord
from evolvable.proxy.records import encode as encode_record
from evolvable.proxy.sessions import Session, SessionManager
from evolvable.proxy.spool import Spool
from evolvable.proxy.upstream import UpstreamClient
from evolvable.proxy.writer import BackgroundWriter, WriterRunner, WriterStats
from evolvable.store import Store
from evolvable.telemetry.metrics import configure_writer_snapshot

GC_YOUNG_THRESHOLD = 7000
"""Allocations between young-generation collections in the serving proxy (CPython's default: 700). With the
heap frozen a young collection costs well under a millisecond, and a request leaves no cyclic garbage, so this
matters little; it only keeps collections rare if some dependency starts leaving cycles."""

log = logging.getLogger("evolvable.proxy")


class ProxyRuntime:
    """Everything one running proxy holds. Reachable from routes as `request.app.state.proxy`."""

    def __init__(
        self,
        config: ProxyConfig,
        store: Store,
        governor: Governor | None,
        authenticator: Authenticator | None,
        rewriter: RequestRewriter | None,
    ) -> None:
        self.config = config.validate()
        self.store = store
        self.governor: Governor = governor or PassThroughGovernor()
        self.authenticator: Authenticator = authenticator or OpenAuthenticator()
        self.authenticator_is_open = authenticator is None
        self.rewriter = rewriter
        self.sessions = SessionManager(store, getattr(self.governor, "redact_identifiers", None))
        if config.spool_dir is None:
            from evolvable.settings import get_settings

            config.spool_dir = get_settings().home / "spool"
        self.spool = Spool(
            config.spool_dir,
            fsync=config.spool_fsync,
            fsync_interval_s=config.spool_fsync_interval_s,
            queue_size=config.spool_queue_size,
            segment_bytes=config.spool_segment_bytes,
            max_segment_age_s=config.spool_max_segment_age_s,
        )
        self.writer_stats = WriterStats()
        self.writer = BackgroundWriter(
            self.spool.reader,
            store,
            self.governor,
            self.sessions,
            self.writer_stats,
            batch_size=config.writer_batch_size,
            idle_s=config.writer_idle_s,
            deadletter_max_age_s=config.deadletter_max_age_s,
        )
        self.deadletter = self.writer.deadletter
        self.writer_runner = WriterRunner(self.writer, mode=config.writer_mode, nice=config.writer_nice)
        self.writer_metrics_path = config.spool_dir / "writer-metrics.prom" if config.writer_mode == "process" else None
        configure_writer_snapshot(self.writer_metrics_path)  # before the writer is forked
        self.upstream: UpstreamClient = None  # type: ignore[assignment]  # made in the lifespan (needs a loop)
        self.dropped_records = 0
        self.calls_refused = 0
        """Calls answered 503 before reaching the upstream because capture was failing (fail closed)."""

    async def authenticate(self, bearer: str | None) -> Principal | None:
        result = self.authenticator.authenticate(bearer)
        if result is None or isinstance(result, Principal):  # a type check costs less than isawaitable
            return result
        return await result

    async def minting_key_active(self, session: Session) -> bool:
        """Whether the API key that created `session` is still valid (a session key dies with it).

        Asks the authenticator's optional `key_active(key_id)` (cached there; `key_active_cached`
        answers from memory without I/O when it can)."""
        if session.minted_by is None:
            return True
        cached = getattr(self.authenticator, "key_active_cached", None)
        known = cached(session.minted_by) if cached is not None else None
        if known is not None:
            return bool(known)
        check = getattr(self.authenticator, "key_active", None)
        return True if check is None else bool(await asyncio.to_thread(check, session.minted_by))

    async def spool_record(self, record: CaptureRecord) -> bool:
        observe_capture(record)
        return await self.spool_record_bytes(encode_record(record), record.id)

    async def spool_record_bytes(self, payload: bytes, record_id: Any = None) -> bool:
        """Spool a capture record; True once it is safe (in the segment file, or queued when
        `reply_after_spooled` is off). Waits under back-pressure; a record that cannot be spooled is
        counted in `records_dropped` and logged, and the caller answers by `capture_on_failure`."""
        timeout = self.config.backpressure_timeout_s
        try:
            if self.config.reply_after_spooled:
                return await self.spool.append_durable(payload, timeout)
            await self.spool.append(payload, timeout)
            return True
        except Exception:
            self.dropped_records += 1
            log.exception("capture record %s dropped", record_id)
            return False

    @property
    def fails_closed(self) -> bool:
        """Whether a call whose capture failed is answered 503 (else it is answered, and counted)."""
        return self.config.capture_on_failure == "closed"

    async def flush(self, timeout_s: float | None = None) -> bool:
        """Wait until every record queued so far is in the store (read-your-writes for the API)."""
        timeout = self.config.read_your_writes_timeout_s if timeout_s is None else timeout_s
        return await asyncio.to_thread(self.wait_stored, timeout)

    def wait_stored(self, timeout_s: float) -> bool:
        """`flush`, blocking: False if the records were not in the store within `timeout_s` (each wait)."""
        end = self.spool.wait_written(self.spool.enqueued, timeout_s)
        if end is None:
            return False
        if self.spool.reader.load_checkpoint() >= end:
            return True  # nothing pending (an idle proxy's dashboard polls): no wake-up, no second read
        self.writer.waker.wake()  # written: the writer applies it now, not after its idle sleep
        return self.spool.wait_applied(end, timeout_s)

    def purge_spool(self, predicate: Callable[[dict[str, Any]], bool]) -> int:
        """Remove spooled capture records matching `predicate(record)`; blocking (call in a thread).

        Records are dicts with `t` (session|call|step|signal|end), `traj` (trajectory id), `tenant`,
        `end_user`; see `records_for` for a ready-made predicate. Returns how many were removed."""

        def matches(payload: bytes) -> bool:
            try:
                return predicate(orjson.loads(payload))
            except orjson.JSONDecodeError:
                return False

        return self.spool.purge(matches) + self.deadletter.purge(matches)

    def status(self, viewer: Principal | None = None) -> dict[str, Any]:
        """Capture health. The writer's last error is shown in full to operators and to the tenant whose
        record it concerns; others see only its kind."""
        operator = viewer is None or viewer.is_operator or self.authenticator_is_open
        return {
            "spool_end": list(self.spool.end),
            "spool_checkpoint": list(self.spool.reader.load_checkpoint()),
            "spool_last_error": self.spool.last_error,
            "records_dropped": self.dropped_records + self.spool.dropped,
            "spool_failing": self.spool.failing,
            "calls_refused": self.calls_refused,
            "capture_on_failure": self.config.capture_on_failure,
            "writer_mode": self.config.writer_mode,
            "writer_alive": self.writer_runner.alive,
            "writer_restarts": self.writer_runner.restarts,
            "sessions_cached": len(self.sessions),
            "dead_letters": self.deadletter.count(),
            **self.writer_stats.as_dict(viewer.tenant_id if viewer else None, operator=operator),
        }

    async def start(self) -> None:
        await asyncio.to_thread(self._open_durable_parts)
        self.upstream = UpstreamClient(self.config.upstreams)
        # Everything loaded so far (FastAPI, pydantic, SQLAlchemy: ~10^5 objects) lives as long as the
        # process: keep it out of the cyclic GC, whose full collections otherwise show up as p99 spikes.
        gc.collect()
        gc.freeze()
        # (An earlier reading that each young collection here cost ~20 ms was the GC probe timing its own
        # gc.get_freeze_count(), which walks the whole frozen list; docs/PERFORMANCE.md, 2026-11-26.)
        gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])

    def _open_durable_parts(self) -> None:
        self.spool.open()
        recovered = self.writer.drain()  # records spooled before a crash land before new traffic
        if recovered:
            log.info("recovered %d spooled records into the store", recovered)
        self.sessions.load_running()
        self.writer_runner.start(close_in_child=(self.spool.lock_fd,) if self.spool.lock_fd is not None else ())

    async def stop(self) -> None:
        if self.upstream is not None:
            await self.upstream.close()
        await asyncio.to_thread(self._close_durable_parts)

    def _close_durable_parts(self) -> None:
        self.spool.close()  # writes what is queued
        self.writer_runner.stop()


def step_record(session: Session, step: Step, at: float) -> StepRecord:
    """The capture record of one step of `session` that is not a model call (a tool step, a handoff...)."""
    return StepRecord(
        id=step.id,
        trajectory_id=session.id,
        tenant_id=session.tenant_id,
        end_user=session.end_user,
        run_agent=session.agent,
        step=step.model_dump(mode="json"),
        at=at,
    )


def records_for(
    *, tenant_id: str | None = None, end_user: str | None = None, trajectory_ids: Sequence[str] | None = None
) -> Callable[[dict[str, Any]], bool]:
    """A purge predicate: records of this tenant, end user and/or these trajectories (all given must match)."""
    ids = set(trajectory_ids or ())

    def matches(rec: dict[str, Any]) -> bool:
        if tenant_id is not None and rec.get("tenant") != tenant_id:
            return False
        if end_user is not None and rec.get("end_user") != end_user:
            return False
        return not (trajectory_ids is not None and rec.get("traj") not in ids)

    return matches
