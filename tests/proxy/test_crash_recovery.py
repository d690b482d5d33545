"""kill -9 of a real `evolvable serve` under load, then a restart: every record that reached the spool
lands in the store exactly once."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from tests.proxy.mock_upstream import MockUpstream

from evolvable.proxy.spool import SpoolReader
from evolvable.store import Store, TrajectoryFilter


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(upstream: MockUpstream, db: str, spool: Path, config: Path, port: int) -> subprocess.Popen[bytes]:
    cmd = [
        sys.executable,
        "-m",
        "evolvable.cli.main",
        "serve",
        "--upstream",
        upstream.url,
        "--db",
        db,
        "--port",
        str(port),
        "--spool-dir",
        str(spool),
        "--config",
        str(config),
    ]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ}, start_new_session=True
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"serve exited: {proc.stderr.read().decode() if proc.stderr else ''}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/v1/proxy/status", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("serve did not start")


def _pending_request_ids(spool_dir: Path) -> set[str]:
    """Trajectory ids of call records spooled but not yet checkpointed (read like the writer does)."""
    reader = SpoolReader(spool_dir)
    ids: set[str] = set()
    with reader.cycle_lock():
        position = reader.load_checkpoint()
        while True:
            records, position = reader.read(position, 500)
            if not records:
                return ids
            ids.update(r["traj"] for r in map(orjson.loads, records) if r["t"] == "call")


def _wait_for(condition: Any, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "load did not progress"
        time.sleep(0.01)


def _writer_pid(proxy_pid: int) -> int:
    """The background writer: the proxy's forked child."""
    children = [
        pid for task in Path(f"/proc/{proxy_pid}/task").iterdir() for pid in (task / "children").read_text().split()
    ]
    assert len(children) == 1, children
    return int(children[0])


def _kill(proc: subprocess.Popen[bytes], target: str) -> None:
    if target == "group":
        os.killpg(proc.pid, signal.SIGKILL)
    elif target == "proxy":
        proc.send_signal(signal.SIGKILL)
    else:
        os.kill(_writer_pid(proc.pid), signal.SIGKILL)


@pytest.mark.slow
@pytest.mark.parametrize("target", ["group", "proxy", "writer"])
def test_kill_9_mid_load_loses_no_answered_call_and_duplicates_nothing(
    upstream: MockUpstream, tmp_path: Path, target: str
) -> None:
    db = f"sqlite:///{tmp_path / 'crash.db'}"
    spool_dir, port = tmp_path / "spool", _free_port()
    config = tmp_path / "proxy.yaml"
    config.write_text("writer_batch_size: 3\nspool_fsync: batch\n")
    Store.open(db).close()
    proc = _serve(upstream, db, spool_dir, config, port)
    received: list[str] = []
    stop = threading.Event()

    def load() -> None:
        with httpx.Client(timeout=5) as client:
            while not stop.is_set():
                try:
                    r = client.post(
                        f"http://127.0.0.1:{port}/v1/chat/completions",
                        json={"model": "mock", "messages": [{"role": "user", "content": "x" * 300}]},
                    )
                except httpx.HTTPError:
                    if target != "writer":
                        return
                    continue
                if r.status_code == 200:
                    received.append(r.headers["x-evolvable-trajectory-id"])

    threads = [threading.Thread(target=load, daemon=True) for _ in range(8)]
    for t in threads:
        t.start()
    try:
        _wait_for(lambda: len(received) >= 300)
        _kill(proc, target)
        if target == "writer":  # the proxy goes on serving; its supervisor restarts the writer
            _wait_for(lambda: len(received) >= 600)
        else:
            proc.wait()
    finally:
        stop.set()
        for t in threads:
            t.join()
    if target == "writer":
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)

    # The writer process may still be finishing a batch: read the spool first, then the store, so a
    # record applied in between is counted in both (and not in neither).
    pending = _pending_request_ids(spool_dir)
    store = Store.open(db)
    before = {h.id for h in store.iter_trajectories(TrajectoryFilter())}
    proc = _serve(upstream, db, spool_dir, config, port)  # recovery drains the spool before serving
    proc.send_signal(signal.SIGTERM)
    proc.wait(30)
    after = list(store.iter_trajectories(TrajectoryFilter()))
    store.close()
    after_ids = {t.id for t in after}
    assert after_ids == before | pending, "every spooled record is stored after the restart"
    assert len(after) == len(after_ids) and all(len(t.steps) == 1 for t in after), "nothing twice"
    # A call is answered only once its record is in the spool file, which outlives the process.
    lost = set(received) - after_ids
    assert not lost, f"{len(lost)} answered calls lost"
    assert len(received) == len(set(received))
    print(f"target={target} answered={len(received)} stored={len(after_ids)} pending_in_spool={len(pending)}")
