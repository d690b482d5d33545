"""OTLP out as runs end: `BackgroundExport` (checkpointed, ties handled) and `evolvable serve --otlp-export`."""

from __future__ import annotations

import gzip
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from tests.proxy.otel_helpers import OTLPSink

from evolvable.protocol.models import Trajectory, TrajectoryStatus, utcnow
from evolvable.proxy.otlp_export import BackgroundExport, otlp_exporter
from evolvable.store import Store


@pytest.fixture
def sink() -> Iterator[OTLPSink]:
    s = OTLPSink()
    yield s
    s.stop()


def _exported_agents(sink: OTLPSink) -> list[str]:
    """The `gen_ai.agent.name` of every root span the sink received, in arrival order."""
    agents = []
    for headers, body in sink.requests:
        raw = gzip.decompress(body) if headers.get("content-encoding") == "gzip" else body
        for rs in ExportTraceServiceRequest.FromString(raw).resource_spans:
            for ss in rs.scope_spans:
                for span in ss.spans:
                    if not span.parent_span_id:
                        attrs = {a.key: a.value.string_value for a in span.attributes}
                        agents.append(attrs["gen_ai.agent.name"])
    return agents


def _ended(agent: str, at_ms_ago: int = 0) -> Trajectory:
    ended = utcnow() - timedelta(milliseconds=at_ms_ago)
    return Trajectory(agent=agent, status=TrajectoryStatus.completed, started_at=ended, ended_at=ended)


def test_runs_are_sent_once_as_they_end_across_restarts(store: Store, sink: OTLPSink, tmp_path: Path) -> None:
    checkpoint = tmp_path / "otlp_export.json"

    def export() -> BackgroundExport:
        return BackgroundExport(store, otlp_exporter(sink.url), checkpoint, settle_s=0.0, batch_size=2)

    store.put_trajectory(_ended("before-first-start", at_ms_ago=60_000))
    assert export().cycle() == 0  # the first start begins now: older runs are a one-off CLI export
    time.sleep(0.01)
    tie = _ended("tie-a")
    store.put_trajectory(tie)
    store.put_trajectory(tie.model_copy(update={"id": "traj_tie_b", "agent": "tie-b"}))
    store.put_trajectory(tie.model_copy(update={"id": "traj_tie_c", "agent": "tie-c"}))
    store.put_trajectory(Trajectory(agent="still-running"))
    first = export()
    assert first.cycle() == 2  # batch of two: the third run shares their end instant
    assert export().cycle() == 1  # a restart resumes at the checkpoint; the tie is neither lost nor resent
    assert export().cycle() == 0
    assert sorted(_exported_agents(sink)) == ["tie-a", "tie-b", "tie-c"]


def test_a_refused_export_keeps_the_checkpoint(store: Store, tmp_path: Path) -> None:
    refusing = OTLPSink(status=400)
    checkpoint = tmp_path / "otlp_export.json"
    try:
        export = BackgroundExport(store, otlp_exporter(refusing.url), checkpoint, settle_s=0.0)
        export.cycle()
        time.sleep(0.01)
        store.put_trajectory(_ended("refused"))
        before = checkpoint.read_text()
        with pytest.raises(Exception, match="refused"):
            export.cycle()
        assert checkpoint.read_text() == before
    finally:
        refusing.stop()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_exports_runs_as_they_end(sink: OTLPSink, tmp_path: Path) -> None:
    port = _free_port()
    config = tmp_path / "proxy.yaml"
    config.write_text("otlp_export_interval_s: 0.2\notlp_export_settle_s: 0.5\n")
    serve = subprocess.Popen(
        [
            sys.executable, "-m", "evolvable.cli.main", "serve",
            "--upstream", "http://127.0.0.1:9/v1", "--db", f"sqlite:///{tmp_path / 'serve.db'}",
            "--port", str(port), "--config", str(config), "--otlp-export", sink.url,
            "--no-governance", "--no-control",
        ],
        env={**os.environ, "EVOLVABLE_HOME": str(tmp_path / "home")},
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "serve.log").open("w"),  # a file, not a pipe: a full pipe would block serve
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"{url}/v1/proxy/status")
                break
            except httpx.TransportError:
                assert serve.poll() is None and time.monotonic() < deadline, (tmp_path / "serve.log").read_text()
                time.sleep(0.2)
        session = httpx.post(f"{url}/v1/sessions", json={"agent": "exported-by-serve"}).json()
        httpx.post(f"{url}/v1/sessions/{session['id']}/end", json={"status": "completed"}).raise_for_status()
        deadline = time.monotonic() + 60
        while "exported-by-serve" not in _exported_agents(sink):
            assert serve.poll() is None and time.monotonic() < deadline, (tmp_path / "serve.log").read_text()
            time.sleep(0.2)
    finally:
        serve.terminate()
        serve.wait(30)
