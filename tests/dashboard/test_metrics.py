"""`/metrics`: Prometheus text that prometheus_client parses, and series that move when traffic flows."""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx
from openai import OpenAI
from prometheus_client.parser import text_string_to_metric_families
from tests.dashboard.stack import AGENT, bootstrap_agent, record_run, tenant_key

from evolvable.control.models import DecisionState, Lever, VersionKind
from evolvable.protocol.harness import Harness

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(url: str) -> Samples:
    reply = httpx.get(f"{url}/metrics", timeout=30)
    assert reply.status_code == 200 and reply.headers["content-type"].startswith("text/plain")
    samples: Samples = {}
    for family in text_string_to_metric_families(reply.text):
        for s in family.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return samples


def total(samples: Samples, name: str, **labels: str) -> float:
    """Sum of a series over the labels not given."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= ls)


def eventually(check: Callable[[], bool], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "the series did not move"
        time.sleep(0.2)


def test_metrics_parse_and_move_with_traffic(stack) -> None:
    server, plane = stack
    bootstrap_agent(plane)
    before = scrape(server.url)
    for name in ("evolvable_spool_backlog_bytes", "evolvable_writer_lag_seconds", "evolvable_proxy_sessions_open"):
        assert total(before, name) >= 0 and any(n == name for n, _ in before), name
    assert total(before, "evolvable_proxy_records_dropped_total") == 0
    assert any(n == "evolvable_trainer_loss" for n, _ in before)  # the weights lever trains in-process

    key = tenant_key(server.url, "acme")
    record_run(server.url, key)
    session = httpx.post(
        f"{server.url}/v1/sessions", json={"agent": AGENT}, headers={"authorization": f"Bearer {key}"}, timeout=30
    ).json()
    llm = OpenAI(base_url=f"{server.url}/v1", api_key=session["api_key"], max_retries=0)
    stream = llm.chat.completions.create(
        model="alias-a", messages=[{"role": "user", "content": "stream please"}], stream=True
    )
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    httpx.post(
        f"{server.url}/v1/sessions/{session['id']}/end",
        json={"status": "abandoned"},
        headers={"authorization": f"Bearer {key}"},
        timeout=30,
    ).raise_for_status()
    candidate = plane.registry.register_harness(Harness(agent=AGENT, system_prompt="Be brief."))
    decision = plane.journal.record_decision(AGENT, Lever.prompt, state=DecisionState.canary)
    plane.journal.start_rollout(AGENT, VersionKind.harness, candidate.id, None, 0.2, decision.id)

    def moved() -> bool:
        after = scrape(server.url)
        chat = {"route": "/v1/chat/completions", "protocol": "chat", "status": "200", "upstream": "mock"}
        return (
            total(after, "evolvable_proxy_requests_total", **chat)
            >= total(before, "evolvable_proxy_requests_total", **chat) + 2
            and total(after, "evolvable_proxy_requests_total", route="/v1/sessions", status="201") >= 2
            and total(after, "evolvable_proxy_request_duration_seconds_count", protocol="chat") >= 2
            and total(after, "evolvable_proxy_overhead_seconds_count", protocol="chat") >= 2
            and total(after, "evolvable_proxy_time_to_first_token_seconds_count", upstream="mock") >= 1
            and total(after, "evolvable_proxy_upstream_duration_seconds_count", upstream="mock") >= 2
            and total(after, "evolvable_proxy_sessions_started_total") >= 2
            and total(after, "evolvable_proxy_sessions_ended_total", status="abandoned") >= 1
            and total(after, "evolvable_writer_records_total") > total(before, "evolvable_writer_records_total")
            and total(after, "evolvable_spool_records_total") > total(before, "evolvable_spool_records_total")
            # counted in the forked writer process, read through its snapshot
            and total(after, "evolvable_redactions_total", kind="EMAIL") >= 1
            and total(after, "evolvable_governed_events_total", capture="full") > 0
            and total(after, "evolvable_control_decisions_total", lever="prompt", state="canary", verdict="none") == 1
            and total(after, "evolvable_control_canary_share", agent=AGENT, state="running") == 0.2
        )

    eventually(moved)
    unauthorized = httpx.get(f"{server.url}/v1/dashboard/runs", timeout=30)
    assert unauthorized.status_code == 401
    after = scrape(server.url)
    assert total(after, "evolvable_proxy_requests_total", route="/v1/dashboard/runs", status="401") >= 1


def test_the_grafana_dashboard_queries_only_series_that_exist(stack) -> None:
    """Every metric the shipped Grafana dashboard queries is exported by serve, the policy server or the trainer."""
    import json
    import re
    from pathlib import Path
    from types import SimpleNamespace

    from prometheus_client import generate_latest

    from evolvable.policy_server.engine import EngineStats
    from evolvable.policy_server.metrics import EngineCollector
    from evolvable.telemetry import metrics

    server, plane = stack
    bootstrap_agent(plane)
    candidate = plane.registry.register_harness(Harness(agent=AGENT, system_prompt="x"))
    decision = plane.journal.record_decision(AGENT, Lever.prompt, state=DecisionState.canary)
    plane.journal.start_rollout(AGENT, VersionKind.harness, candidate.id, None, 0.1, decision.id)
    record_run(server.url, tenant_key(server.url, "acme"))
    metrics.GOVERNANCE_FAILURES.labels("probe")  # a labelled series exists once it has been used
    engine = SimpleNamespace(stats=EngineStats(), queue_depth=0, batch_size=0)
    eventually(lambda: total(scrape(server.url), "evolvable_redactions_total") > 0)  # the writer has governed it
    texts = [
        httpx.get(f"{server.url}/metrics", timeout=30).text,
        metrics.exposition([metrics.POLICY_REGISTRY], [EngineCollector(engine)]).decode(),
        generate_latest(metrics.TRAINER_REGISTRY).decode(),
        generate_latest(metrics.WRITER_REGISTRY).decode(),
    ]
    exported = {s.name for text in texts for f in text_string_to_metric_families(text) for s in f.samples}
    board = json.loads(
        (Path(__file__).resolve().parents[2] / "docs" / "grafana" / "evolvable-dashboard.json").read_text()
    )
    queried = {
        name
        for panel in board["panels"]
        for target in panel.get("targets", [])
        for name in re.findall(r"evolvable_[a-z_]+", target["expr"])
    }
    assert queried and queried <= exported, sorted(queried - exported)


def test_a_failing_governance_stage_is_counted(tmp_path) -> None:
    """The governor fails closed; the failure shows on `evolvable_governance_failures_total`."""
    from prometheus_client import generate_latest
    from tests.governance.builders import make_trajectory

    from evolvable.governance.pipeline import Governor
    from evolvable.protocol.models import events_for
    from evolvable.store import Store
    from evolvable.telemetry import metrics

    class Exploding:
        def redact_events(self, events: list) -> list:
            raise RuntimeError("recognizer crashed")

    def failures() -> float:
        text = generate_latest(metrics.WRITER_REGISTRY).decode()
        return total(
            {
                (s.name, frozenset(s.labels.items())): s.value
                for f in text_string_to_metric_families(text)
                for s in f.samples
            },
            "evolvable_governance_failures_total",
            stage="governor",
        )

    with Store.open(f"sqlite:///{tmp_path / 'store.db'}") as store:
        before = failures()
        governed = Governor(store, redactor=Exploding()).govern(events_for(make_trajectory()))
        assert "<REDACTION_FAILED>" in str([e.model_dump() for e in governed])
        assert failures() == before + 1
