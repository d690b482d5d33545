"""The forked writer's metrics snapshot: rewritten at most once a second while busy, and once more when idle."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.registry import CollectorRegistry

from evolvable.telemetry import metrics


def test_snapshots_are_rate_limited_and_flushed_when_idle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "writer-metrics.prom"
    monkeypatch.setattr(metrics, "_writer_snapshot", path)
    monkeypatch.setattr(metrics, "_writer_owner_pid", -1)  # as in the forked writer process
    monkeypatch.setattr(metrics, "_snapshot_written_at", float("-inf"))
    monkeypatch.setattr(metrics, "_snapshot_pending", False)
    rendered: list[int] = []

    def counting(registry: CollectorRegistry) -> bytes:
        rendered.append(1)
        return generate_latest(registry)

    monkeypatch.setattr(metrics, "generate_latest", counting)
    for _ in range(20):  # one batch after another
        metrics.export_writer_snapshot()
    assert len(rendered) == 1 and path.exists()
    metrics.GOVERNED_EVENTS.labels("full").inc(3)
    metrics.export_writer_snapshot()  # skipped: the last snapshot is less than a second old
    assert len(rendered) == 1
    metrics.flush_writer_snapshot()  # the writer went idle
    assert len(rendered) == 2
    assert 'evolvable_governed_events_total{capture="full"}' in path.read_text()
    metrics.flush_writer_snapshot()  # nothing pending: no rewrite
    assert len(rendered) == 2
