"""`evolvable trajectories list|show|export`, run as an operator would: the command in a subprocess."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from tests.proxy.otel_helpers import OTLPSink

from evolvable.protocol import (
    ChatMessage,
    CompletionChoice,
    LLMCallStep,
    Signal,
    SignalKind,
    ToolCallStep,
    Trajectory,
    TrajectoryStatus,
)
from evolvable.protocol.converters import from_otel
from evolvable.proxy.otlp_codec import PROTOBUF, Encoding, decode_request
from evolvable.store import Store, TrajectoryFilter

EVOLVABLE = [sys.executable, "-m", "evolvable.cli.main", "trajectories"]
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run([*EVOLVABLE, *args], capture_output=True, text=True, timeout=120, env=env)


def _run(i: int, tenant: str, agent: str, status: TrajectoryStatus) -> Trajectory:
    return Trajectory(
        id=f"traj_cli_{i}",
        tenant_id=tenant,
        agent=agent,
        status=status,
        started_at=T0 + timedelta(minutes=i),
        ended_at=T0 + timedelta(minutes=i, seconds=30),
        task_id=f"task-{i % 2}",
        steps=[
            LLMCallStep(
                id="s1",
                model="m",
                request_messages=[ChatMessage(role="user", content=f"question {i}")],
                choices=[CompletionChoice(message=ChatMessage(role="assistant", content=f"answer {i}"))],
                prompt_token_ids=[1, 2],
            ),
            ToolCallStep(id="s2", tool_name="lookup", arguments={"id": i}, result={"ok": True}, status="ok"),
        ],
        signals=[Signal(kind=SignalKind.outcome, value=1.0)],
    )


@pytest.fixture
def stored(db_url: str) -> Iterator[tuple[str, Store]]:
    store = Store.open(db_url)
    statuses = [TrajectoryStatus.completed, TrajectoryStatus.failed]
    for i in range(6):
        store.put_trajectory(_run(i, "acme" if i < 4 else "globex", "support" if i % 3 else "billing", statuses[i % 2]))
    yield db_url, store
    store.close()


def test_list_filters_like_the_http_api_and_pages_with_a_cursor(stored: tuple[str, Store]) -> None:
    db, store = stored
    args = ["--tenant", "acme", "--agent", "support", "--status", "completed", "--db", db]
    first = run("list", *args, "--json", "--limit", "1")
    assert first.returncode == 0, first.stderr
    page = json.loads(first.stdout)
    expected, _ = store.list_trajectories(TrajectoryFilter(tenant_id="acme", agent="support", status="completed"), 1)
    assert [h["id"] for h in page["data"]] == [h.id for h in expected] == ["traj_cli_2"]
    assert page["next_cursor"] is None  # traj_cli_1 is failed, traj_cli_3 is billing
    table = run("list", "--tenant", "acme", "--started-after", "2026-03-01T12:02:00+00:00", "--db", db)
    assert table.returncode == 0, table.stderr
    assert "traj_cli_2" in table.stdout and "traj_cli_3" in table.stdout and "traj_cli_1" not in table.stdout
    paged = json.loads(run("list", "--db", db, "--json", "--limit", "4").stdout)
    rest = json.loads(run("list", "--db", db, "--json", "--cursor", paged["next_cursor"]).stdout)
    assert [h["id"] for h in paged["data"] + rest["data"]] == [f"traj_cli_{i}" for i in range(5, -1, -1)]


def test_show_prints_the_steps_or_the_whole_trajectory(stored: tuple[str, Store]) -> None:
    db, store = stored
    table = run("show", "traj_cli_1", "--db", db)
    assert table.returncode == 0, table.stderr
    assert "answer 1" in table.stdout and "lookup" in table.stdout and "outcome" in table.stdout
    as_json = run("show", "traj_cli_1", "--db", db, "--json")
    assert Trajectory.model_validate_json(as_json.stdout) == store.get_trajectory("traj_cli_1")
    other_tenant = run("show", "traj_cli_1", "--tenant", "globex", "--db", db)
    assert other_tenant.returncode == 2 and "not found" in other_tenant.stderr


def test_export_writes_atdp_jsonl(stored: tuple[str, Store], tmp_path: Path) -> None:
    db, store = stored
    out = tmp_path / "runs.jsonl"
    result = run("export", "--tenant", "globex", "-o", str(out), "--db", db)
    assert result.returncode == 0, result.stderr
    lines = [Trajectory.model_validate_json(line) for line in out.read_text().splitlines()]
    assert {t.id for t in lines} == {"traj_cli_4", "traj_cli_5"}
    assert all(t == store.get_trajectory(t.id) for t in lines)


@pytest.fixture
def sink() -> Iterator[OTLPSink]:
    s = OTLPSink()
    yield s
    s.stop()


def test_export_sends_genai_spans_that_the_otlp_proto_types_parse(stored: tuple[str, Store], sink: OTLPSink) -> None:
    db, store = stored
    result = run(
        "export", "--tenant", "acme", "--otlp", sink.url, "--otlp-header", "authorization=Bearer k1", "--db", db
    )
    assert result.returncode == 0, result.stderr
    assert "4 trajectories (12 spans)" in result.stderr
    ((headers, body),) = sink.requests
    assert headers["authorization"] == "Bearer k1" and headers["content-type"] == PROTOBUF
    raw = gzip.decompress(body) if headers.get("content-encoding") == "gzip" else body
    request = ExportTraceServiceRequest.FromString(raw)
    spans = [s for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans]
    assert len(spans) == 12 and len({s.trace_id for s in spans}) == 4
    chat = next(s for s in spans if s.name == "chat m")
    attrs = {a.key: a.value for a in chat.attributes}
    assert attrs["gen_ai.operation.name"].string_value == "chat"
    assert attrs["gen_ai.request.model"].string_value == "m"
    service = {a.key: a.value.string_value for a in request.resource_spans[0].resource.attributes}
    assert service["service.name"] == "evolvable"
    # Lossless: the spans convert back to the stored trajectories.
    back = {t.id: t for t in from_otel(decode_request(raw, Encoding(PROTOBUF)), tenant_id="acme")}
    assert set(back) == {f"traj_cli_{i}" for i in range(4)}
    assert all(back[i].steps == store.get_trajectory(i).steps for i in back)


def test_export_refused_by_the_endpoint_exits_2_and_bad_options_are_named(stored: tuple[str, Store]) -> None:
    db, _ = stored
    refusing = OTLPSink(status=400)
    try:
        result = run("export", "--otlp", refusing.url, "--db", db)
    finally:
        refusing.stop()
    assert result.returncode == 2 and "refused" in result.stderr
    assert run("export", "--db", db).returncode == 2
    bad_status = run("list", "--status", "done", "--db", db)
    assert bad_status.returncode == 2 and "--status" in bad_status.stderr
    bad_time = run("list", "--started-after", "yesterday", "--db", db)
    assert bad_time.returncode == 2 and "--started-after" in bad_time.stderr
    bad_header = run("export", "--otlp", "http://127.0.0.1:9", "--otlp-header", "nope", "--db", db)
    assert bad_header.returncode == 2 and "KEY=VALUE" in bad_header.stderr
