"""Redaction reaches every client-named field that is stored, end to end through the real proxy and writer, on
SQLite and PostgreSQL: a signal's `source`, an explicit tool step's `tool_name` and `tool_call_id` (the
`steps.tool_call_id` column too), the `X-Evolvable-Agent` header, a session's agent and task id (the
`proxy_sessions` row too), and end-user ids in the audit log's targets.

Each planted value is looked for in every column of every stored row, so a field nobody thought of fails too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import sqlalchemy as sa
from tests.proxy.conftest import ProxyServer, make_config
from tests.proxy.mock_upstream import MockUpstream

from evolvable.governance.audit import AuditLog
from evolvable.governance.wiring import Governance
from evolvable.proxy.app import create_app
from evolvable.store import Store

ADMIN = "adm-redaction-coverage-key"
AGENT_EMAIL = "ops.lead@globex-mail.com"
TOOL_PHONE = "+44 20 7946 0958"
CALL_EMAIL = "carla.m@initech-corp.net"
SOURCE_EMAIL = "reviewer.jane@umbrella-labs.org"
SESSION_AGENT_EMAIL = "desk.owner@hooli-mail.com"
TASK_PHONE = "+49 30 901820"
END_USER = "bob.tenant.user@example.org"
PLANTED = (AGENT_EMAIL, TOOL_PHONE, CALL_EMAIL, SOURCE_EMAIL, SESSION_AGENT_EMAIL, TASK_PHONE, END_USER)


@pytest.fixture
def governed(upstream: MockUpstream, store: Store, tmp_path: Path) -> Any:
    gov = Governance.for_store(store, admin_key=ADMIN)
    gov.directory.create_tenant("acme")
    key = gov.directory.issue_key("acme").key
    app = create_app(
        make_config(upstream.url, tmp_path / "spool"),
        store,
        governor=gov.governor,
        authenticator=gov.authenticator,
        routers=gov.routers,
    )
    gov.install(app)
    server = ProxyServer(app).start()
    yield server, key
    server.stop()


def _raw_rows(store: Store) -> list[str]:
    """Every stored row of every table, as text."""
    rows: list[str] = []
    meta = sa.MetaData()
    meta.reflect(store.engine)
    with store.engine.connect() as conn:
        for table in meta.sorted_tables:
            rows += [f"{table.name}: {tuple(r)}" for r in conn.execute(sa.select(table))]
    return rows


def test_identifiers_and_audit_targets_are_redacted(governed: Any, store: Store) -> None:
    proxy, key = governed
    auth = {"Authorization": f"Bearer {key}"}
    # A call outside any session names its agent in the header.
    client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key=key, max_retries=0)
    plain = client.chat.completions.with_raw_response.create(
        model="mock",
        messages=[{"role": "user", "content": "hi"}],
        user=END_USER,
        extra_headers={"X-Evolvable-Agent": AGENT_EMAIL},
    )
    # A session with an explicit tool step and a signal whose source names a person.
    r = httpx.post(
        f"{proxy.url}/v1/sessions",
        headers=auth,
        json={"agent": f"desk {SESSION_AGENT_EMAIL}", "task_id": f"callback {TASK_PHONE}", "end_user": END_USER},
    )
    assert r.status_code == 201, r.text
    session = r.json()
    with store.engine.connect() as conn:  # the session row is written at once, before the writer runs
        row = conn.execute(sa.text("SELECT agent, task_id FROM proxy_sessions WHERE id = :id"), {"id": session["id"]})
        assert tuple(row.one()) == ("desk <EMAIL_1>", "callback <PHONE_1>")
    s_auth = {"Authorization": f"Bearer {session['api_key']}"}
    step = {
        "kind": "tool_call",
        "tool_name": f"call {TOOL_PHONE}",
        "tool_call_id": f"call:{CALL_EMAIL}",
        "status": "ok",
        "result": "done",
    }
    r = httpx.post(f"{proxy.url}/v1/sessions/{session['id']}/steps", headers=s_auth, json=step)
    assert r.status_code == 201, r.text
    signal = {"kind": "verifier", "value": 1.0, "source": SOURCE_EMAIL, "label": "ok"}
    r = httpx.post(f"{proxy.url}/v1/sessions/{session['id']}/signals", headers=s_auth, json={"signals": [signal]})
    assert r.status_code == 201, r.text
    r = httpx.post(f"{proxy.url}/v1/sessions/{session['id']}/end", headers=s_auth, json={"status": "completed"})
    assert r.status_code == 200, r.text
    proxy.flush()

    plain_t = store.get_trajectory(plain.headers["x-evolvable-trajectory-id"])
    assert plain_t.agent == "<EMAIL_1>"
    t = store.get_trajectory(session["id"])
    tool = t.tool_calls()[0]
    assert (tool.tool_name, tool.tool_call_id) == ("call <PHONE_2>", "call:<EMAIL_2>")
    assert (t.agent, t.task_id) == ("desk <EMAIL_1>", "callback <PHONE_1>")
    assert t.signals[0].source == "<EMAIL_3>"
    assert t.end_user == END_USER  # purge by user needs it verbatim
    stored = _raw_rows(store)
    assert any("call:<EMAIL_2>" in row for row in stored if row.startswith("steps:"))  # the column too
    assert [row for row in stored for value in PLANTED[:-1] if value in row] == []

    # Reads name the end user in their query; the audit log keeps a digest only.
    r = httpx.get(f"{proxy.url}/v1/trajectories", headers=auth, params={"end_user": END_USER})
    assert r.status_code == 200, r.text
    assert {d["id"] for d in r.json()["data"]} == {session["id"], plain_t.id}
    r = httpx.post(
        f"{proxy.url}/v1/admin/purge", headers={"Authorization": f"Bearer {ADMIN}"}, json={"end_user": END_USER}
    )
    assert r.status_code == 200, r.text
    assert r.json()["trajectories"] == 2
    targets = [e.target for e in AuditLog(store.engine).query()]
    assert any(t.startswith("trajectories?end_user=sha256:") for t in targets), targets

    assert [row for row in _raw_rows(store) if END_USER in row] == []
