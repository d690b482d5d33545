"""Plant secrets in real traffic through the proxy (real openai client), then read the raw database and spool.

The Governor with the real redaction engine sits between the spool and the store. Afterwards the
SQLite file (and its WAL) is scanned byte by byte; on PostgreSQL every text, JSON and varchar column
of every table is dumped as text. No planted value may appear in the clear.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
import sqlalchemy as sa
from tests.proxy.conftest import ProxyServer, make_config
from tests.proxy.mock_upstream import MockUpstream

from evolvable.governance.api import governance_routers
from evolvable.governance.pipeline import Governor
from evolvable.governance.tenants import TenantDirectory
from evolvable.proxy.app import create_app
from evolvable.store import Store

SECRETS = {
    "email": "maria.gonzalez@example-corp.com",
    "phone": "+1 (415) 555-0132",
    "card": "4111 1111 1111 1111",
    "iban": "GB82 WEST 1234 5698 7654 32",
    "ssn": "536-22-8714",
    "aws": "AKIAZ7QWERTYUIOPASDF",
    "github": "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8",
    "openai": "sk-proj-" + "Xy9Zk2Lm4Np6Qr8St0Uv1Wx3Yz5Ab7Cd9Ef1Gh3",
    "db_password": "Tr0ub4dor-and-3",
}


@pytest.fixture(scope="module")
def upstream() -> Iterator[MockUpstream]:
    mock = MockUpstream().start()
    yield mock
    mock.stop()


def _spool_bytes(directory: Path) -> bytes:
    return b"".join(p.read_bytes() for p in directory.glob("*") if p.is_file())


def _raw_text(store: Store, db_url: str) -> bytes:
    """Everything the database holds, as bytes."""
    store.engine.dispose()
    if db_url.startswith("sqlite"):
        path = Path(db_url.removeprefix("sqlite:///"))
        return b"".join(p.read_bytes() for p in path.parent.glob(path.name + "*"))
    chunks: list[bytes] = []
    with store.engine.connect() as conn:
        columns = conn.execute(
            sa.text(
                "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = 'public' "
                "AND data_type IN ('text', 'character varying', 'json', 'jsonb')"
            )
        ).all()
        for table, column in columns:
            for (value,) in conn.execute(sa.text(f'SELECT "{column}"::text FROM "{table}"')):
                if value is not None:
                    chunks.append(value.encode())
    assert columns, "no text columns found: the dump is broken"
    return b"\n".join(chunks)


def test_no_planted_secret_reaches_storage(store: Store, db_url: str, upstream: MockUpstream, tmp_path: Path) -> None:
    directory = TenantDirectory(store.engine)
    directory.create_tenant("acme")
    key = directory.issue_key("acme").key
    app = create_app(
        make_config(upstream.url, tmp_path / "spool"),
        store,
        governor=Governor(store, directory=directory),
        authenticator=directory,
        routers=governance_routers(store, directory),
    )
    server = ProxyServer(app).start()
    try:
        auth = {"Authorization": f"Bearer {key}"}
        s = httpx.post(
            f"{server.url}/v1/sessions",
            json={
                "agent": "support",
                "end_user": "customer-42",
                "task_input": {"ticket": f"Customer {SECRETS['email']} called from {SECRETS['phone']}"},
                "metadata": {"intent": "refund", "note": f"card on file {SECRETS['card']}"},
            },
            headers=auth,
        ).json()
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key=s["api_key"])
        messages = [
            {"role": "system", "content": f"Use key {SECRETS['openai']} for the billing API."},
            {"role": "user", "content": f"Refund to IBAN {SECRETS['iban']}, my SSN is {SECRETS['ssn']}."},
        ]
        first = client.chat.completions.create(model="mock-tools", messages=messages)
        call = first.choices[0].message.tool_calls[0]
        messages += [
            first.choices[0].message.model_dump(exclude_none=True),
            {
                "role": "tool",
                "tool_call_id": call.id,
                "content": f'{{"aws_access_key_id": "{SECRETS["aws"]}", "token": "{SECRETS["github"]}"}}',
            },
            {
                "role": "user",
                "content": f"Also, the DB is postgres://admin:{SECRETS['db_password']}@db.internal:5432/x",
            },
        ]
        stream = client.chat.completions.create(model="mock", messages=messages, stream=True)
        echoed = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
        assert SECRETS["db_password"] in echoed  # the live call itself is not altered
        step = {"kind": "tool_call", "tool_name": "send_email", "arguments": {"to": SECRETS["email"]}, "status": "ok"}
        assert httpx.post(f"{server.url}/v1/sessions/{s['id']}/steps", json=step, headers=auth).status_code < 300
        signal = {"kind": "user_feedback", "value": 1, "label": "thanks", "metadata": {"reply_to": SECRETS["email"]}}
        httpx.post(f"{server.url}/v1/sessions/{s['id']}/signals", json={"signals": [signal]}, headers=auth)
        httpx.post(f"{server.url}/v1/sessions/{s['id']}/end", json={"status": "completed", "outcome": 1}, headers=auth)
        server.flush()
        spool_dir = tmp_path / "spool"
        stored = store.get_trajectory(s["id"])
        # Applied records must not linger: the writer rotates an idle spool and deletes applied segments.
        deadline = time.monotonic() + 15
        while SECRETS["email"].encode() in _spool_bytes(spool_dir) and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        server.stop()

    # The run is complete and usable: structure and placeholders, not holes.
    assert [st.kind for st in stored.steps] == ["llm_call", "tool_call", "llm_call", "tool_call"]
    assert stored.outcome() == 1.0 and stored.end_user == "customer-42"
    assert "<EMAIL_1>" in stored.task_input["ticket"]
    raw = _raw_text(store, db_url)
    spooled = _spool_bytes(spool_dir)
    for name, value in SECRETS.items():
        assert value.encode() not in raw, f"{name} stored in the clear"
        assert value.encode() not in spooled, f"{name} left in the spool after it was applied"
    assert b"customer-42" in raw  # the erasure key stays, so the user can still be purged
