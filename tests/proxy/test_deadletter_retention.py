"""Quarantined records hold raw, unredacted data, so they leave the disk after `deadletter_max_age_s`: the
writer deletes them (counted, logged) also while nothing new is quarantined; younger ones stay replayable."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from tests.proxy.conftest import ProxyServer, make_config, new_session

from evolvable.protocol.models import new_id
from evolvable.proxy.config import ConfigError
from evolvable.proxy.deadletter import DEFAULT_MAX_AGE_S, DeadLetter
from evolvable.store import Store

DAY = 86400.0


class _Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _record(secret: str = "4111 1111 1111 1111") -> bytes:
    return orjson.dumps({"t": "step", "traj": "traj_x", "tenant": "acme", "step": {"result": secret}})


def test_entries_older_than_the_maximum_age_are_deleted_counted_and_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = _Clock(1_000_000.0)
    queue = DeadLetter(tmp_path, clock=clock)
    assert queue.max_age_s == DEFAULT_MAX_AGE_S == 7 * DAY
    old = queue.add(_record(), "bad")
    clock.now += 3 * DAY
    young = queue.add(_record(), "bad")
    clock.now += 4 * DAY  # `old` is now 7 days old: kept up to the limit, not a second past it
    assert queue.expire() == 0
    clock.now += 1
    with caplog.at_level(logging.WARNING, logger="evolvable.proxy.deadletter"):
        assert queue.expire() == 1
    assert [e.id for e in queue.entries()] == [young.id]
    assert queue.take(old.id) is None and queue.take(young.id) is not None
    assert queue.expired == 1
    assert "deleted 1 quarantined record(s) older than 7.0 days" in caplog.text
    assert b"4111" not in b"".join(p.read_bytes() for p in queue.directory.iterdir() if young.id not in p.name)


def test_unreadable_and_half_written_entries_expire_by_their_file_time(tmp_path: Path) -> None:
    queue = DeadLetter(tmp_path, max_age_s=DAY)
    queue.directory.mkdir(parents=True)
    torn = queue.directory / f"{new_id('dlq')}.dlq"
    torn.write_bytes(b'{"payload": "4111 1111 1111 1111", "quarant')
    tmp = queue.directory / f"{new_id('dlq')}.tmp"
    tmp.write_bytes(_record())
    fresh = queue.directory / f"{new_id('dlq')}.tmp"
    fresh.write_bytes(_record())
    two_days_ago = time.time() - 2 * DAY
    for path in (torn, tmp):
        os.utime(path, (two_days_ago, two_days_ago))
    assert queue.expire() == 2
    assert sorted(queue.directory.iterdir()) == [fresh]


def test_expire_due_runs_at_most_once_per_interval(tmp_path: Path) -> None:
    clock = _Clock(0.0)
    queue = DeadLetter(tmp_path, max_age_s=10.0, clock=clock)  # the interval is a tenth of the age here: 1 s
    queue.add(_record(), "bad")
    clock.now = 10.5
    assert queue.expire_due() == 1
    clock.now = 0.0
    queue.add(_record(), "bad")  # already expired by 11.0
    clock.now = 11.0
    assert queue.expire_due() == 0 and queue.count() == 1  # asked again within the interval: not looked at
    clock.now = 11.6
    assert queue.expire_due() == 1 and queue.count() == 0


def test_a_non_positive_age_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        DeadLetter(tmp_path, max_age_s=0)
    with pytest.raises(ConfigError):
        make_config("http://127.0.0.1:9", tmp_path, deadletter_max_age_s=-1).validate()


def test_the_running_writer_drops_expired_quarantine(proxy_factory: Any, store: Store) -> None:
    """Through the real proxy and writer, on both backends: a poison record is quarantined, then deleted by
    the writer once older than the configured age, with no further traffic."""
    server: ProxyServer = proxy_factory(store, config={"deadletter_max_age_s": 1.5})
    session = new_session(server)
    poison = {"id": new_id("step"), "kind": "tool_call", "tool_name": "t", "started_at": "0001-01-01T00:00:00+05:00"}
    record = {"t": "step", "id": poison["id"], "traj": session["id"], "tenant": "default", "step": poison}
    assert server.runtime.spool.append_nowait(orjson.dumps(record))
    server.flush()
    status = httpx.get(f"{server.url}/v1/proxy/status").json()
    assert status["records_quarantined"] == 1 and status["dead_letters"] == 1
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and httpx.get(f"{server.url}/v1/proxy/status").json()["dead_letters"]:
        time.sleep(0.1)
    assert httpx.get(f"{server.url}/v1/proxy/status").json()["dead_letters"] == 0
    assert list(server.runtime.deadletter.directory.iterdir()) == []
