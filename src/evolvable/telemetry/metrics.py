"""Every Prometheus metric Evolvable exports, defined once, so names and labels stay consistent.

Each component has its own registry, so a process exposes only its own series (the proxy does not
report a trainer's loss as 0); prometheus_client's default registry keeps the process and GC collectors.

- component metrics, updated where things happen (the proxy's ASGI entry, the capture spool, the policy
  server's engine, the training loop);
- writer metrics on `WRITER_REGISTRY`: updated inside the background writer, which by default runs in
  a forked child process. The child writes its registry to a snapshot file after every governed batch
  (`export_writer_snapshot`), and the proxy's `/metrics` appends that file (see docs/dashboard.md);
- state read at scrape time (spool backlog, sessions open, decisions, canaries, engine queue): custom
  collectors next to the component that owns the state, registered per app by `exposition(...)`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.registry import Collector

from evolvable.telemetry.tallies import TallyCounter, TallyHistogram

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
_OVERHEAD_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5)

# ---------------------------------------------------------------------------------------- proxy

PROXY_REGISTRY = CollectorRegistry(auto_describe=True)

# Observed on every request: tallies (`telemetry.tallies`), the same exposition as Counter/Histogram at about
# a third of the cost on the serving thread.
PROXY_REQUESTS = TallyCounter(
    "evolvable_proxy_requests",
    "HTTP requests the proxy answered, by route template, wire protocol, status and upstream.",
    ["route", "protocol", "status", "upstream"],
    PROXY_REGISTRY,
)
PROXY_LATENCY = TallyHistogram(
    "evolvable_proxy_request_duration_seconds",
    "Time from request start to the last byte of the reply (upstream time included).",
    ["route", "protocol"],
    PROXY_REGISTRY,
    buckets=_LATENCY_BUCKETS,
)
PROXY_OVERHEAD = TallyHistogram(
    "evolvable_proxy_overhead_seconds",
    "Time the proxy itself added to a request (its x-evolvable-overhead-ms header).",
    ["route", "protocol"],
    PROXY_REGISTRY,
    buckets=_OVERHEAD_BUCKETS,
)
TIME_TO_FIRST_TOKEN = TallyHistogram(
    "evolvable_proxy_time_to_first_token_seconds",
    "Streaming calls: time from sending the request upstream to its first chunk.",
    ["upstream"],
    PROXY_REGISTRY,
    buckets=_LATENCY_BUCKETS,
)
UPSTREAM_LATENCY = TallyHistogram(
    "evolvable_proxy_upstream_duration_seconds",
    "Time the upstream took to answer a completion call.",
    ["upstream"],
    PROXY_REGISTRY,
    buckets=_LATENCY_BUCKETS,
)
SESSIONS_STARTED = Counter(
    "evolvable_proxy_sessions_started", "Sessions created through /v1/sessions.", registry=PROXY_REGISTRY
)
SESSIONS_ENDED = Counter(
    "evolvable_proxy_sessions_ended",
    "Sessions ended, by final status (abandoned: closed by the idle sweep or the client).",
    ["status"],
    registry=PROXY_REGISTRY,
)

# ---------------------------------------------------------------------------------------- writer (child process)

WRITER_REGISTRY = CollectorRegistry(auto_describe=True)
REDACTIONS = Counter(
    "evolvable_redactions",
    "Values replaced by placeholders before storage, by recognizer kind.",
    ["kind"],
    registry=WRITER_REGISTRY,
)
GOVERNANCE_FAILURES = Counter(
    "evolvable_governance_failures",
    "Trajectory batches where a governance stage failed (content stored as <REDACTION_FAILED>).",
    ["stage"],
    registry=WRITER_REGISTRY,
)
GOVERNED_EVENTS = Counter(
    "evolvable_governed_events",
    "Events that passed the governor, by capture mode applied.",
    ["capture"],
    registry=WRITER_REGISTRY,
)


def count_redactions(findings: Iterable[tuple[Any, ...]]) -> None:
    """Redaction findings `(start, end, kind, ...)` about to be replaced by placeholders."""
    for finding in findings:
        REDACTIONS.labels(finding[2]).inc()


_writer_snapshot: Path | None = None
_writer_owner_pid = os.getpid()
WRITER_SNAPSHOT_INTERVAL_S = 1.0
"""A forked writer rewrites its snapshot at most this often while busy, and once more when it goes idle."""
_snapshot_written_at = float("-inf")
_snapshot_pending = False


def configure_writer_snapshot(path: Path | None) -> None:
    """Where a writer forked from this process leaves its metrics (a stale file from an earlier run is removed)."""
    global _writer_snapshot, _writer_owner_pid
    _writer_snapshot, _writer_owner_pid = path, os.getpid()
    if path is not None:
        path.unlink(missing_ok=True)


def export_writer_snapshot(*, force: bool = False) -> None:
    """In a forked writer, write the writer registry to the snapshot file (atomically); a no-op in-process.

    At most once per `WRITER_SNAPSHOT_INTERVAL_S` unless `force`: rendering the registry and renaming a
    file after every batch was ~10% of the writer's CPU at a batch per 20-50 ms (docs/PERFORMANCE.md).
    A skipped snapshot is left pending for `flush_writer_snapshot`, which the writer calls when idle."""
    global _snapshot_written_at, _snapshot_pending
    path = _writer_snapshot
    if path is None or os.getpid() == _writer_owner_pid:
        return
    now = time.monotonic()
    if not force and now - _snapshot_written_at < WRITER_SNAPSHOT_INTERVAL_S:
        _snapshot_pending = True
        return
    _snapshot_written_at, _snapshot_pending = now, False
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(generate_latest(WRITER_REGISTRY))
        os.replace(tmp, path)
    except OSError:
        pass  # metrics must never break the writer; the next batch tries again


def flush_writer_snapshot() -> None:
    """Write a snapshot `export_writer_snapshot` skipped (the writer is idle: its metrics are final for now)."""
    if _snapshot_pending:
        export_writer_snapshot(force=True)


def writer_exposition(snapshot: Path | None) -> bytes:
    """The writer's metrics: the child's snapshot when one exists, else this process's writer registry."""
    if snapshot is not None:
        try:
            return snapshot.read_bytes()
        except OSError:
            pass
    return generate_latest(WRITER_REGISTRY)


# ---------------------------------------------------------------------------------------- policy server

POLICY_REGISTRY = CollectorRegistry(auto_describe=True)

DECODE_BATCH_SIZE = Histogram(
    "evolvable_policy_decode_batch_size",
    "Sequences in each batched decode step of the policy server.",
    buckets=(1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64),
    registry=POLICY_REGISTRY,
)

# ---------------------------------------------------------------------------------------- trainer

TRAINER_REGISTRY = CollectorRegistry(auto_describe=True)

TRAINER_LOSS = Gauge(
    "evolvable_trainer_loss", "Loss of the latest optimizer step (mean per generated token).", registry=TRAINER_REGISTRY
)
TRAINER_KL = Gauge(
    "evolvable_trainer_kl", "Approximate KL to the behaviour policy at the latest step.", registry=TRAINER_REGISTRY
)
TRAINER_KL_REF = Gauge(
    "evolvable_trainer_kl_ref",
    "KL to the reference policy at the latest step (kl_coef > 0).",
    registry=TRAINER_REGISTRY,
)
TRAINER_REWARD = Gauge(
    "evolvable_trainer_reward_mean", "Mean outcome reward of the job's training episodes.", registry=TRAINER_REGISTRY
)
TRAINER_TOKENS_PER_S = Gauge(
    "evolvable_trainer_tokens_per_second", "Training throughput since the job started.", registry=TRAINER_REGISTRY
)
TRAINER_STEPS = Counter(
    "evolvable_trainer_optimizer_steps",
    "Optimizer steps taken by training jobs in this process.",
    registry=TRAINER_REGISTRY,
)
TRAINER_TOKENS = Counter(
    "evolvable_trainer_tokens", "Tokens (prompt + completion) trained on in this process.", registry=TRAINER_REGISTRY
)


def observe_training_step(record: dict[str, float]) -> None:
    """One optimizer step's record from the training loop."""
    TRAINER_LOSS.set(record["loss"])
    TRAINER_KL.set(record["approx_kl"])
    TRAINER_KL_REF.set(record.get("kl_ref", 0.0))
    TRAINER_TOKENS_PER_S.set(record["tokens_per_s"])
    TRAINER_STEPS.inc()
    TRAINER_TOKENS.inc(record.get("tokens", 0))


def serve_trainer_metrics(port: int, addr: str = "127.0.0.1") -> WSGIServer:
    """Expose the trainer's metrics (and the process's) over HTTP for as long as the job's process runs;
    returns prometheus_client's server (call `.shutdown()` to stop it early)."""
    from prometheus_client import start_http_server

    registry = CollectorRegistry(auto_describe=False)
    registry.register(REGISTRY)
    registry.register(TRAINER_REGISTRY)
    server, _thread = start_http_server(port, addr=addr, registry=registry)
    return server


# ---------------------------------------------------------------------------------------- exposition


class TokenRate:
    """Tokens per second between scrapes, from a monotonically growing counter value."""

    def __init__(self) -> None:
        self._last: tuple[float, float] | None = None
        self._rate = 0.0

    def update(self, total: float) -> float:
        now = time.monotonic()
        if self._last is not None and now > self._last[0]:
            self._rate = max(0.0, (total - self._last[1]) / (now - self._last[0]))
        self._last = (now, total)
        return self._rate


def exposition(
    registries: Iterable[CollectorRegistry],
    collectors: Iterable[Collector] = (),
    *,
    writer: bool = False,
    writer_snapshot: Path | None = None,
) -> bytes:
    """The text for one /metrics reply: the process collectors, the component's registries, its scrape-time
    collectors and, with `writer`, the background writer's (from `writer_snapshot` when it is a child)."""
    parts = [generate_latest(REGISTRY), *(generate_latest(r) for r in registries)]
    own = CollectorRegistry(auto_describe=False)
    for collector in collectors:
        own.register(collector)
    parts.append(generate_latest(own))
    if writer:
        parts.append(writer_exposition(writer_snapshot))
    return b"".join(parts)
