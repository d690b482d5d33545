"""A session's end is final: its key stops working at once (on every replica: the table says so), and
a later `end` with another status is refused with 409 instead of a 200 that changes nothing."""

from __future__ import annotations

from typing import Any

import httpx
from tests.proxy.conftest import ProxyServer, new_session

from evolvable.protocol.models import TrajectoryStatus
from evolvable.store import Store

CHAT = {"model": "mock", "messages": [{"role": "user", "content": "hi"}]}


def _auth(session: dict[str, Any]) -> dict[str, str]:
    return {"Authorization": f"Bearer {session['api_key']}"}


def test_a_session_key_dies_with_its_session(proxy: ProxyServer, store: Store) -> None:
    session = new_session(proxy)
    base = f"{proxy.url}/v1/sessions/{session['id']}"
    assert httpx.post(f"{proxy.url}/v1/chat/completions", json=CHAT, headers=_auth(session)).status_code == 200
    assert httpx.post(f"{base}/end", json={"status": "completed"}, headers=_auth(session)).status_code == 200
    expired = [
        httpx.post(f"{proxy.url}/v1/chat/completions", json=CHAT, headers=_auth(session)),
        httpx.get(f"{proxy.url}/v1/trajectories/{session['id']}", headers=_auth(session)),
        httpx.post(f"{base}/steps", json={"kind": "tool_call", "tool_name": "t"}, headers=_auth(session)),
    ]
    assert [r.status_code for r in expired] == [401, 401, 401]
    assert all(r.json()["error"]["code"] == "session_key_expired" for r in expired)
    # Another replica (a fresh cache) sees the end too: it is in the table, not only in memory.
    proxy.runtime.sessions._by_key.clear()
    r = httpx.post(f"{proxy.url}/v1/chat/completions", json=CHAT, headers=_auth(session))
    assert r.status_code == 401
    proxy.flush()
    t = store.get_trajectory(session["id"])
    assert t.status == TrajectoryStatus.completed and len(t.steps) == 1


def test_status_changes_after_end_are_refused(lite_proxy: ProxyServer, sqlite_store: Store) -> None:
    session = new_session(lite_proxy)
    end = f"{lite_proxy.url}/v1/sessions/{session['id']}/end"
    assert httpx.post(end, json={"status": "failed"}, headers=_auth(session)).status_code == 200
    again = httpx.post(end, json={"status": "failed"}, headers=_auth(session))
    assert again.status_code == 200 and again.json()["status"] == "failed"  # the same end: idempotent
    for headers in (_auth(session), {}):  # its own (ended) key, or a tenant principal
        r = httpx.post(end, json={"status": "completed"}, headers=headers)
        assert r.status_code == 409 and r.json()["error"]["code"] == "session_ended", r.text
    lite_proxy.flush()
    assert sqlite_store.get_trajectory(session["id"]).status == TrajectoryStatus.failed
