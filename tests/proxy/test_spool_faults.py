"""Spool faults are never silent: a full spool filesystem (a real, small tmpfs), a spool directory made
read-only for a moment (a read-only bind mount), a killed writer process, and raw records that must leave
the disk under steady traffic. Every answered call is stored; every refused one is counted."""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.proxy.conftest import ProxyServer, make_config, new_session
from tests.proxy.mock_upstream import MockUpstream

from evolvable.proxy.app import create_app
from evolvable.store import Store


def _mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True, capture_output=True)


@contextlib.contextmanager
def _tmpfs(path: Path, size: str) -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    try:
        _mount("-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path))
    except (subprocess.CalledProcessError, FileNotFoundError) as err:
        pytest.skip(f"mounting a tmpfs needs root (mount failed: {err})")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def _read_only_bind(path: Path) -> None:
    """Make `path` read-only for new opens (files already open stay writable, as in a chmod).

    The bind and its read-only remount are two steps; a file the writer process opens between them
    (its lock or checkpoint, briefly) makes the remount busy, so it is retried."""
    for _attempt in range(100):
        try:
            _mount("--bind", "-o", "ro", str(path), str(path))
            return
        except FileNotFoundError as err:
            pytest.skip(f"a read-only bind mount needs mount(8) ({err})")
        except subprocess.CalledProcessError as err:
            if b"permission denied" in err.stderr.lower() or b"must be superuser" in err.stderr.lower():
                pytest.skip(f"a read-only bind mount needs root ({err.stderr!r})")
            subprocess.run(["umount", "-l", str(path)], check=False, capture_output=True)
            time.sleep(0.02)
    pytest.fail("could not make the spool directory read-only")


def _fill(path: Path) -> None:
    """Write until the filesystem is full."""
    with open(path, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 65536)
        except OSError as err:
            assert err.errno == errno.ENOSPC


def _start(upstream: MockUpstream, store: Store, spool_dir: Path, **overrides: Any) -> ProxyServer:
    cfg = make_config(upstream.url, spool_dir, **overrides)
    return ProxyServer(create_app(cfg, store)).start()


def _chat(server: ProxyServer, session: dict[str, Any], text: str) -> httpx.Response:
    body = {"model": "mock", "messages": [{"role": "user", "content": text}]}
    return httpx.post(
        f"{server.url}/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {session['api_key']}"}
    )


def _first_answered(server: ProxyServer, session: dict[str, Any]) -> str:
    """Call until one is answered (calls refused before the upstream until a probe write succeeds)."""
    deadline = time.monotonic() + 30
    while True:
        r = _chat(server, session, "probe")
        if r.status_code == 200:
            return r.headers["x-evolvable-step-id"]
        assert r.status_code == 503 and time.monotonic() < deadline, r.text
        time.sleep(0.1)


def _status(server: ProxyServer) -> dict[str, Any]:
    return httpx.get(f"{server.url}/v1/proxy/status").json()


def _stored_step_ids(store: Store, session: dict[str, Any]) -> list[str]:
    return [s.id for s in store.get_trajectory(session["id"]).steps]


def _wait(predicate: Any, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


def test_full_spool_filesystem_refuses_calls_counts_them_and_recovers(
    upstream: MockUpstream, store: Store, tmp_path: Path
) -> None:
    with _tmpfs(tmp_path / "fs", "2m") as fs:
        server = _start(upstream, store, fs / "spool")
        try:
            session = new_session(server)
            server.flush()
            _fill(fs / "filler")
            answered, refused = [], 0
            upstream_calls = len(upstream.requests)
            for i in range(30):
                r = _chat(server, session, f"call {i} " + "x" * 8000)
                if r.status_code == 200:
                    answered.append(r.headers["x-evolvable-step-id"])
                else:
                    assert r.status_code == 503 and r.json()["error"]["code"] == "capture_unavailable"
                    refused += 1
            assert refused > 0
            status = _status(server)
            # Refused after the upstream answered (a record failed), or before calling it at all.
            assert status["records_dropped"] + status["calls_refused"] == refused and status["spool_failing"]
            assert status["calls_refused"] > 0 and len(upstream.requests) - upstream_calls < refused
            (fs / "filler").unlink()
            answered.append(_first_answered(server, session))  # the next probe finds writing works again
            for i in range(10):
                r = _chat(server, session, f"after {i}")
                assert r.status_code == 200
                answered.append(r.headers["x-evolvable-step-id"])
            server.flush()
            assert sorted(_stored_step_ids(store, session)) == sorted(answered)  # 0 answered calls lost
            assert not _status(server)["spool_failing"]
            print(
                f"full spool: answered={len(answered)} refused_503={refused} dropped={status['records_dropped']}"
                f" refused_before_upstream={status['calls_refused']}"
            )
        finally:
            server.stop()
        # A proxy restarts on a full spool filesystem: the checkpoint needs no new space.
        _fill(fs / "filler")
        server = _start(upstream, store, fs / "spool")
        try:
            assert _status(server)["writer_alive"]
        finally:
            server.stop()
            (fs / "filler").unlink()


def test_fail_open_answers_and_counts_what_it_could_not_capture(
    upstream: MockUpstream, sqlite_store: Store, tmp_path: Path
) -> None:
    with _tmpfs(tmp_path / "fs", "2m") as fs:
        server = _start(upstream, sqlite_store, fs / "spool", capture_on_failure="open")
        try:
            session = new_session(server)
            server.flush()
            _fill(fs / "filler")
            responses = [_chat(server, session, f"call {i} " + "x" * 8000) for i in range(20)]
            assert all(r.status_code == 200 for r in responses)
            (fs / "filler").unlink()
            server.flush()
            stored = len(_stored_step_ids(sqlite_store, session))
            dropped = _status(server)["records_dropped"]
            assert dropped > 0 and stored + dropped == len(responses)
            print(f"fail open: answered={len(responses)} stored={stored} dropped={dropped}")
        finally:
            server.stop()


def test_read_only_spool_directory_moment_is_refused_then_recovered(
    upstream: MockUpstream, sqlite_store: Store, tmp_path: Path
) -> None:
    spool = tmp_path / "spool"
    server = _start(upstream, sqlite_store, spool, spool_max_segment_age_s=0.1)
    try:
        session = new_session(server)
        answered = [_chat(server, session, "before").headers["x-evolvable-step-id"]]
        with server.runtime.spool._file_lock:  # no segment is opened through the mount while it turns read-only
            _read_only_bind(spool)
        try:
            time.sleep(0.5)  # the active segment ages out; opening the next one fails
            refused = 0
            for i in range(5):
                r = _chat(server, session, f"read-only {i}")
                if r.status_code == 200:
                    answered.append(r.headers["x-evolvable-step-id"])
                else:
                    assert r.status_code == 503
                    refused += 1
        finally:
            subprocess.run(["umount", "-l", str(spool)], check=True)
        status = _status(server)
        assert refused > 0 and status["records_dropped"] + status["calls_refused"] == refused
        answered.append(_first_answered(server, session))
        for i in range(5):
            r = _chat(server, session, f"writable again {i}")
            assert r.status_code == 200, r.text
            answered.append(r.headers["x-evolvable-step-id"])
        server.flush()
        assert sorted(_stored_step_ids(sqlite_store, session)) == sorted(answered)
        print(f"read-only moment: answered={len(answered)} refused_503={refused}")
    finally:
        server.stop()


def test_a_killed_writer_is_restarted_and_capture_goes_on(proxy_factory: Any, store: Store) -> None:
    server = proxy_factory(store)
    runtime = server.runtime
    session = new_session(server)
    first_pid = runtime.writer_runner.pid
    assert first_pid is not None
    os.kill(first_pid, signal.SIGKILL)
    _wait(lambda: runtime.writer_runner.restarts >= 1 and runtime.writer_runner.alive)
    assert runtime.writer_runner.pid != first_pid
    answered = [_chat(server, session, f"after kill {i}").headers["x-evolvable-step-id"] for i in range(5)]
    server.flush()
    assert sorted(_stored_step_ids(store, session)) == sorted(answered)
    status = _status(server)
    assert status["writer_alive"] and status["writer_restarts"] >= 1


def test_raw_records_leave_the_disk_under_steady_traffic(proxy_factory: Any, sqlite_store: Store) -> None:
    server = proxy_factory(sqlite_store, config={"spool_max_segment_age_s": 0.3})
    session = new_session(server)
    marker = "raw-marker-4f1c"
    spool = server.runtime.spool.directory

    def marker_on_disk() -> bool:
        found = False
        for path in spool.glob("*.seg"):
            with contextlib.suppress(FileNotFoundError):
                found = found or marker.encode() in path.read_bytes()
        return found

    with server.runtime.spool.reader.cycle_lock():  # the writer waits: the record must be on disk now
        assert _chat(server, session, marker).status_code == 200
        assert marker_on_disk()
    deadline = time.monotonic() + 30
    while marker_on_disk():  # traffic never pauses long enough for the idle rotation
        assert time.monotonic() < deadline, "the raw record stayed on disk"
        assert _chat(server, session, "steady").status_code == 200
        time.sleep(0.05)
