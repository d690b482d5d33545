"""`POST /v1/traces`: OTLP/HTTP from the real OpenTelemetry SDK becomes one governed trajectory per trace."""

from __future__ import annotations

import gzip
import json
from typing import Any

import httpx
import pytest
from google.rpc import status_pb2
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from tests.proxy.conftest import ProxyServer
from tests.proxy.otel_helpers import otlp_json, recorded_spans, run_agent

from evolvable.governance.tenants import TenantDirectory
from evolvable.governance.wiring import Governance
from evolvable.protocol.models import LLMCallStep, ToolCallStep, Trajectory, TrajectoryStatus
from evolvable.store import Store, TrajectoryFilter


def _read(server: ProxyServer, trajectory_id: str, key: str | None = None) -> Trajectory:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    r = httpx.get(f"{server.url}/v1/trajectories/{trajectory_id}", headers=headers)
    assert r.status_code == 200, r.text
    return Trajectory.model_validate_json(r.content)


def _assert_the_agent_run(t: Trajectory) -> None:
    assert t.agent == "support" and t.status == TrajectoryStatus.completed and t.ended_at is not None
    assert [s.kind for s in t.steps] == ["llm_call", "tool_call", "llm_call"]
    first, tool, second = t.steps
    assert isinstance(first, LLMCallStep) and isinstance(tool, ToolCallStep) and isinstance(second, LLMCallStep)
    assert first.model == "gpt-4o" and first.usage is not None and first.usage.prompt_tokens == 31
    assert first.response is not None and first.response.tool_calls[0].id == "call_1"
    assert tool.tool_name == "lookup" and tool.result == {"status": "shipped"} and tool.llm_step_id == first.id
    assert second.response is not None and second.response.content == "Order 7 has shipped."


def test_the_sdk_exporter_posts_protobuf_batches_that_merge_into_one_trajectory(
    proxy_factory: Any, store: Store
) -> None:
    directory = TenantDirectory(store.engine)
    directory.create_tenant("acme")
    key = directory.issue_key("acme").key
    gov = Governance.for_store(store, admin_key="")
    server = proxy_factory(store, governor=gov.governor, authenticator=gov.authenticator)
    exporter = OTLPSpanExporter(
        endpoint=f"{server.url}/v1/traces", headers={"authorization": f"Bearer {key}"}, compression=Compression.Gzip
    )
    trace_id = run_agent(exporter)  # four export requests: chat, tool, chat, then the root
    assert store.count(TrajectoryFilter()) == 1
    t = _read(server, f"traj_{trace_id}", key)
    _assert_the_agent_run(t)
    assert t.tenant_id == "acme" and t.metadata["otel_trace_id"] == trace_id
    # Governance applied: the e-mail address never reached the store.
    question = t.steps[0].request_messages[0].content
    assert "ann@example.com" not in question and "Where is order 7?" in question


def test_otlp_json_batches_merge_and_a_resent_batch_adds_nothing(lite_proxy: ProxyServer) -> None:
    spans = recorded_spans()
    trace_id = format(spans[0].context.trace_id, "032x")
    batches = [otlp_json(spans[:2]), otlp_json(spans[2:])]
    for doc in [*batches, batches[0], batches[1]]:  # the exporter retried both
        body = gzip.compress(json.dumps(doc).encode())
        r = httpx.post(
            f"{lite_proxy.url}/v1/traces",
            content=body,
            headers={"content-type": "application/json", "content-encoding": "gzip"},
        )
        assert r.status_code == 200, r.text
        assert r.json() == {}
    t = _read(lite_proxy, f"traj_{trace_id}")
    _assert_the_agent_run(t)
    assert len(t.steps) == 3 and lite_proxy.runtime.store.count(TrajectoryFilter()) == 1


def test_a_trace_reads_as_running_until_its_root_span_arrives(lite_proxy: ProxyServer) -> None:
    spans = recorded_spans()
    children, root = spans[:-1], spans[-1:]
    trace_id = format(spans[0].context.trace_id, "032x")
    httpx.post(f"{lite_proxy.url}/v1/traces", json=otlp_json(children)).raise_for_status()
    assert _read(lite_proxy, f"traj_{trace_id}").status == TrajectoryStatus.running
    httpx.post(f"{lite_proxy.url}/v1/traces", json=otlp_json(root)).raise_for_status()
    _assert_the_agent_run(_read(lite_proxy, f"traj_{trace_id}"))


def test_spans_without_valid_ids_are_rejected_as_partial_success(lite_proxy: ProxyServer) -> None:
    doc = otlp_json(recorded_spans())
    bad = doc["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    bad["spanId"] = "not-hex"
    r = httpx.post(f"{lite_proxy.url}/v1/traces", json=doc)
    assert r.status_code == 200
    assert r.json()["partialSuccess"]["rejectedSpans"] == "1"
    assert "spanId" in r.json()["partialSuccess"]["errorMessage"]
    proto = httpx.post(
        f"{lite_proxy.url}/v1/traces",
        content=b"",
        headers={"content-type": "application/x-protobuf"},
    )
    assert proto.status_code == 200
    assert not ExportTraceServiceResponse.FromString(proto.content).HasField("partial_success")


@pytest.mark.parametrize(
    ("content", "headers", "status", "says"),
    [
        (b"{not json", {"content-type": "application/json"}, 400, "not valid JSON"),
        (b'{"resourceSpans": 3}', {"content-type": "application/json"}, 400, "resourceSpans"),
        (b"\xff\xff\xff", {"content-type": "application/x-protobuf"}, 400, "protobuf"),
        (b"plain", {"content-type": "application/json", "content-encoding": "gzip"}, 400, "gzip"),
        (b"{}", {"content-type": "application/json", "content-encoding": "br"}, 415, "encoding"),
        (b"{}", {"content-type": "text/plain"}, 415, "content type"),
    ],
)
def test_malformed_bodies_get_4xx_with_an_otlp_status(
    lite_proxy: ProxyServer, content: bytes, headers: dict[str, str], status: int, says: str
) -> None:
    r = httpx.post(f"{lite_proxy.url}/v1/traces", content=content, headers=headers)
    assert r.status_code == status
    if headers["content-type"] == "application/x-protobuf":
        assert says in status_pb2.Status.FromString(r.content).message
    else:
        body = r.json()
        assert says in body["message"] and body["code"] in (3, 8)
    assert lite_proxy.runtime.store.count(TrajectoryFilter()) == 0


def test_a_decompression_bomb_is_refused(proxy_factory: Any, sqlite_store: Store) -> None:
    server = proxy_factory(sqlite_store, config={"max_body_bytes": 1000})
    body = gzip.compress(b" " * 10_000)
    r = httpx.post(
        f"{server.url}/v1/traces",
        content=body,
        headers={"content-type": "application/json", "content-encoding": "gzip"},
    )
    assert r.status_code == 413


def test_keys_scope_traces_to_their_tenant(proxy_factory: Any, sqlite_store: Store) -> None:
    directory = TenantDirectory(sqlite_store.engine)
    directory.create_tenant("acme")
    directory.create_tenant("globex")
    acme, globex = directory.issue_key("acme").key, directory.issue_key("globex").key
    gov = Governance.for_store(sqlite_store, admin_key="")
    server = proxy_factory(sqlite_store, governor=gov.governor, authenticator=gov.authenticator)
    doc = otlp_json(recorded_spans())
    url = f"{server.url}/v1/traces"
    assert httpx.post(url, json=doc).status_code == 401
    assert httpx.post(url, json=doc, headers={"authorization": "Bearer evk_wrong"}).status_code == 401
    assert httpx.post(url, json=doc, headers={"authorization": "Bearer evs_session"}).status_code == 403
    assert httpx.post(url, json=doc, headers={"authorization": f"Bearer {acme}"}).json() == {}
    # The same trace id from another tenant is refused, not merged into acme's run.
    other = httpx.post(url, json=doc, headers={"authorization": f"Bearer {globex}"}).json()
    assert other["partialSuccess"]["rejectedSpans"] == "4"
    (header,) = sqlite_store.list_trajectories(TrajectoryFilter())[0]
    assert header.tenant_id == "acme"


def test_trajectories_exported_over_otlp_are_received_losslessly(lite_proxy: ProxyServer, tmp_path: Any) -> None:
    from evolvable.protocol.models import ChatMessage, CompletionChoice, Signal, SignalKind
    from evolvable.proxy.otlp_export import export_trajectories, otlp_exporter

    source = Store.open(f"sqlite:///{tmp_path / 'source.db'}")
    original = Trajectory(
        agent="exported",
        status=TrajectoryStatus.completed,
        steps=[
            LLMCallStep(
                id="s1",
                model="m",
                request_messages=[ChatMessage(role="user", content="hi")],
                choices=[CompletionChoice(message=ChatMessage(role="assistant", content="hello"))],
                prompt_token_ids=[1, 2],
            )
        ],
        signals=[Signal(kind=SignalKind.outcome, value=1.0)],
    )
    source.put_trajectory(original)
    exporter = otlp_exporter(lite_proxy.url)  # a base URL: /v1/traces is appended
    sent = export_trajectories(source.iter_trajectories(TrajectoryFilter()), exporter)
    exporter.shutdown()
    assert sent == (1, 2)
    (header,) = lite_proxy.runtime.store.list_trajectories(TrajectoryFilter())[0]
    back = _read(lite_proxy, header.id)
    assert back.agent == "exported" and back.steps == original.steps
    assert [s.value for s in back.signals] == [1.0]


def _one_span(**fields: Any) -> dict[str, Any]:
    span = {"traceId": "4bf92f3577b34da6a3ce929d0e0e4736", "spanId": "00f067aa0ba902b7", "name": "chat m", **fields}
    return {"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}


@pytest.mark.parametrize(
    "doc",
    [
        {"resourceSpans": ["not an object"]},
        {"resourceSpans": [{"scopeSpans": [{"spans": ["not an object"]}]}]},
        _one_span(attributes="not a list"),
        _one_span(attributes=[{"key": "gen_ai.operation.name", "value": "not an AnyValue"}]),
        _one_span(startTimeUnixNano="yesterday"),
        _one_span(attributes=[{"key": "evolvable.step", "value": {"stringValue": "{broken"}}]),
        _one_span(attributes=[{"key": "gen_ai.input.messages", "value": {"stringValue": '[{"parts": 3}]'}}]),
    ],
)
def test_malformed_spans_never_cause_a_server_error(lite_proxy: ProxyServer, doc: dict[str, Any]) -> None:
    """Rejected (400 or partial success) and not stored, or read leniently (an unreadable attribute
    value counts as absent) and stored whole; never a 500."""
    r = httpx.post(f"{lite_proxy.url}/v1/traces", json=doc)
    assert r.status_code in (200, 400), r.text
    rejected = r.status_code == 400 or int(r.json().get("partialSuccess", {}).get("rejectedSpans", 0)) == 1
    assert lite_proxy.runtime.store.count(TrajectoryFilter()) == (0 if rejected else 1)
