"""One acting control plane across replicas: PostgreSQL advisory lock, SQLite lease."""

from __future__ import annotations

from tests.control.conftest import base_harness

from evolvable.control.leader import LeaderLock
from evolvable.control.runtime import ControlPlane
from evolvable.store import Store


def test_only_one_of_two_control_planes_acts(db_url: str) -> None:
    first, second = Store.open(db_url), Store.open(db_url)
    try:
        a, b = ControlPlane(first), ControlPlane(second)
        a.bootstrap(base_harness())
        assert a.tick().leader is True
        report = b.tick()
        assert report.leader is False and str(report).startswith("not the leader")
        assert a.tick().leader is True  # the leader keeps its lock across ticks
        a.leader.release()
        assert b.tick().leader is True  # and another replica takes over once it is gone
        assert a.tick().leader is False
        b.leader.release()
    finally:
        first.close()
        second.close()


def test_an_expired_sqlite_lease_is_taken_over(tmp_path) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'lease.db'}")
    try:
        crashed = LeaderLock(store.engine, lease_s=-1)  # its lease is already expired: a crashed leader
        assert crashed.acquire()
        other = LeaderLock(store.engine)
        assert other.acquire() and not LeaderLock(store.engine).acquire()
    finally:
        store.close()


def test_a_sqlite_lease_is_renewed_while_a_long_tick_runs(tmp_path) -> None:
    import threading

    store = Store.open(f"sqlite:///{tmp_path / 'lease.db'}")
    try:
        leader = LeaderLock(store.engine, lease_s=3.0)
        other = LeaderLock(store.engine, lease_s=3.0)
        assert leader.acquire()
        done = threading.Event()
        with leader.kept():  # a tick that lasts several leases
            taken = [other.acquire() for _ in range(4) if not done.wait(1.2)]  # 4.8 s: past the lease
        assert len(taken) == 4 and not any(taken)  # nobody took over mid-tick
    finally:
        store.close()
