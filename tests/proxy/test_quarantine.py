"""A record the writer cannot apply is quarantined (dead-letter queue: counted, listed for admins,
replayable after a fix) instead of blocking every tenant; startup never fails because of one bad
record; a database outage is retried, never quarantined. Both backends where the store is involved."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from tests.proxy.conftest import ProxyServer, make_config, new_session
from tests.proxy.mock_upstream import MockUpstream

from evolvable.errors import StoreError
from evolvable.protocol.models import Event, StepAppended, new_id
from evolvable.proxy.app import create_app
from evolvable.proxy.deadletter import DeadLetter
from evolvable.proxy.hooks import Principal
from evolvable.proxy.sessions import SessionManager
from evolvable.proxy.spool import Spool, SpoolReader
from evolvable.proxy.writer import BackgroundWriter, WriterStats
from evolvable.store import Store

CHAT = {"model": "mock", "messages": [{"role": "user", "content": "hi"}]}


def _poison_step(trajectory_id: str, tenant: str = "default") -> bytes:
    """What the proxy accepted before its input checks: a timestamp no database can hold."""
    step = {"id": new_id("step"), "kind": "tool_call", "tool_name": "t", "started_at": "0001-01-01T00:00:00+05:00"}
    return orjson.dumps({"t": "step", "id": step["id"], "traj": trajectory_id, "tenant": tenant, "step": step})


def _auth(session: dict[str, Any]) -> dict[str, str]:
    return {"Authorization": f"Bearer {session['api_key']}"}


def _chat(server: ProxyServer, session: dict[str, Any]) -> str:
    r = httpx.post(f"{server.url}/v1/chat/completions", json=CHAT, headers=_auth(session))
    assert r.status_code == 200, r.text
    return r.headers["x-evolvable-step-id"]


def test_a_poison_record_is_quarantined_and_capture_goes_on(proxy: ProxyServer, store: Store) -> None:
    session = new_session(proxy)
    before = _chat(proxy, session)
    assert proxy.runtime.spool.append_nowait(_poison_step(session["id"]))
    after = [_chat(proxy, session) for _ in range(3)]
    proxy.flush()
    assert sorted(s.id for s in store.get_trajectory(session["id"]).steps) == sorted([before, *after])
    status = httpx.get(f"{proxy.url}/v1/proxy/status").json()
    assert status["records_quarantined"] == 1 and status["dead_letters"] == 1
    entries = httpx.get(f"{proxy.url}/v1/proxy/deadletter").json()["data"]
    assert len(entries) == 1 and entries[0]["trajectory_id"] == session["id"] and entries[0]["kind"] == "step"
    assert "payload" not in entries[0] and entries[0]["error"]


def test_startup_drains_past_a_bad_record(upstream: MockUpstream, store: Store, tmp_path: Path) -> None:
    spool_dir = tmp_path / "spool"
    with Spool(spool_dir) as spool:  # left behind by an earlier proxy, together with good records
        good = orjson.dumps({"t": "session", "id": "traj_good", "traj": "traj_good", "tenant": "default", "at": 1.7e9})
        for payload in (good, _poison_step("traj_good"), good):
            spool.append_nowait(payload)
        spool.wait_written(3, 10)
    server = ProxyServer(create_app(make_config(upstream.url, spool_dir), store)).start()
    try:
        assert store.get_header("traj_good").id == "traj_good"
        assert len(DeadLetter(spool_dir).entries()) == 1
    finally:
        server.stop()


class SwitchableGovernor:
    """Refuses records that mention `boom` until fixed: a bug fixed after the records were quarantined."""

    def __init__(self) -> None:
        self.broken = True

    def govern(self, events: list[Event], runs: object = None) -> list[Event]:
        if self.broken and any(isinstance(e, StepAppended) and "boom" in e.model_dump_json() for e in events):
            raise ValueError("governor cannot handle this record")
        return events


class TwoTenants:
    def authenticate(self, bearer: str | None) -> Principal | None:
        return {"key-a": Principal("a"), "key-b": Principal("b"), "admin-a": Principal("a", is_admin=True)}.get(
            bearer or ""
        )


def test_quarantined_records_are_replayed_after_a_fix_and_shown_to_their_tenant_only(
    proxy_factory: Any, sqlite_store: Store
) -> None:
    governor = SwitchableGovernor()
    server = proxy_factory(
        sqlite_store, governor=governor, authenticator=TwoTenants(), config={"writer_mode": "thread"}
    )
    a, b = {"Authorization": "Bearer key-a"}, {"Authorization": "Bearer key-b"}
    admin_a = {"Authorization": "Bearer admin-a"}
    session = httpx.post(f"{server.url}/v1/sessions", json={"agent": "x"}, headers=a).json()
    bad = {"model": "mock", "messages": [{"role": "user", "content": "boom"}]}
    assert httpx.post(f"{server.url}/v1/chat/completions", json=bad, headers=_auth(session)).status_code == 200
    _chat(server, session)
    server.flush()
    assert len(sqlite_store.get_trajectory(session["id"]).steps) == 1
    mine = httpx.get(f"{server.url}/v1/proxy/status", headers=a).json()
    theirs = httpx.get(f"{server.url}/v1/proxy/status", headers=b).json()
    assert "governor cannot handle" in mine["last_quarantine_error"]
    assert theirs["last_quarantine_error"] == "a record of another tenant was quarantined"
    assert httpx.get(f"{server.url}/v1/proxy/deadletter", headers=a).status_code == 403  # not an admin
    assert httpx.get(f"{server.url}/v1/proxy/deadletter", headers=admin_a).json()["data"]

    governor.broken = False  # the fix
    r = httpx.post(f"{server.url}/v1/proxy/deadletter/replay", headers=admin_a)
    assert r.status_code == 200 and len(r.json()["replayed"]) == 1
    server.flush()
    assert len(sqlite_store.get_trajectory(session["id"]).steps) == 2
    assert httpx.get(f"{server.url}/v1/proxy/deadletter", headers=admin_a).json()["data"] == []


def test_a_database_outage_is_retried_not_quarantined(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'db.sqlite'}")
    spool_dir = tmp_path / "spool"
    with Spool(spool_dir) as spool:
        spool.append_nowait(_poison_step("traj_x"))
        spool.wait_written(1, 10)
    writer = BackgroundWriter(SpoolReader(spool_dir), store, _Passthrough(), SessionManager(store), WriterStats())
    writer.poison_retry_delays_s = ()
    store.engine.dispose()
    (tmp_path / "db.sqlite").unlink()
    (tmp_path / "db.sqlite").mkdir()  # the database file is gone: every connection fails
    with pytest.raises(StoreError):
        writer.cycle()
    assert DeadLetter(spool_dir).entries() == []
    reader = SpoolReader(spool_dir)
    pending, _position = reader.read(reader.load_checkpoint(), 10)
    assert len(pending) == 1  # nothing was skipped: the record waits for the database


class _Passthrough:
    def govern(self, events: list[Event], runs: object = None) -> list[Event]:
        return events


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "evolvable.cli.main", "deadletter", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200"},
    )


def test_deadletter_cli_lists_replays_and_discards(tmp_path: Path) -> None:
    spool_dir = tmp_path / "spool"
    queue = DeadLetter(spool_dir)
    kept = queue.add(_poison_step("traj_cli", tenant="acme"), "OverflowError: date value out of range")
    dropped = queue.add(_poison_step("traj_cli2"), "ValueError: bad")
    listed = _cli("list", "--spool-dir", str(spool_dir), "--tenant", "acme")
    assert listed.returncode == 0 and kept.id in listed.stdout and dropped.id not in listed.stdout
    assert _cli("discard", "dlq_nope", "--spool-dir", str(spool_dir)).returncode == 2
    assert _cli("discard", dropped.id, "--spool-dir", str(spool_dir)).returncode == 0
    replayed = _cli("replay", "--spool-dir", str(spool_dir))
    assert replayed.returncode == 0, replayed.stderr
    assert queue.entries() == []
    reader = SpoolReader(spool_dir)
    records, _position = reader.read(reader.load_checkpoint(), 10)
    assert [orjson.loads(r)["traj"] for r in records] == ["traj_cli"]
