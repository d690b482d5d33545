"""`benchmarks/floor_writer/`: a proxy whose writer applies batches through `writer_floor.py`'s checked floor must
store every call `proxy_overhead.py` sends (plain and streamed), or its figures would measure a writer that drops
work."""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path

import msgspec
import pytest
from tests.benchmarks.loading import BENCHMARKS, load_benchmark

from evolvable.proxy.hooks import PassThroughGovernor
from evolvable.proxy.records import CallRecord, encode
from evolvable.proxy.sessions import SessionManager
from evolvable.proxy.spool import Spool, SpoolReader
from evolvable.proxy.writer import BackgroundWriter, WriterStats
from evolvable.store import Store

STREAM = "".join(
    f'data: {{"id":"chatcmpl-s","model":"mock","choices":[{{"index":0,"delta":{{"content":"{word}"}}}}]}}\n\n'
    for word in ("It ", "shipped", ".")
)


def _install_floor_writer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(BackgroundWriter, "cycle", BackgroundWriter.cycle)  # restored after the test
    probe = BENCHMARKS / "floor_writer" / "sitecustomize.py"
    spec = importlib.util.spec_from_file_location("floor_writer_probe", probe)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.install()


def test_the_floor_writer_stores_every_plain_and_streamed_call(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    capture_cpu = load_benchmark("capture_cpu")
    plain = capture_cpu.frame_calls(5, [capture_cpu.reply_bytes(i, 0, 0) for i in range(5)], one_call=True)
    streamed = CallRecord(
        id="req_s",
        request_id="req_s",
        trajectory_id="traj_s",
        agent="support",
        request={"model": "mock", "messages": capture_cpu.MESSAGES, "stream": True},
        upstream="mock",
        stream=True,
        started=time.time(),
        latency_ms=3.0,
    )
    streamed.sse = STREAM
    _install_floor_writer(monkeypatch)
    spool_dir = tmp_path / "spool"
    with Store.open(f"sqlite:///{tmp_path / 'store.db'}") as store:
        with Spool(spool_dir) as spool:
            for payload in [*plain, encode(streamed)]:
                assert spool.append_nowait(payload)
            spool.wait_written(6, 10)
        stats = WriterStats()
        writer = BackgroundWriter(SpoolReader(spool_dir), store, PassThroughGovernor(), SessionManager(store), stats)
        assert writer.drain() == 6
        assert stats.as_dict()["records_applied"] == 6
        with store.engine.connect() as conn:
            assert conn.exec_driver_sql("SELECT count(*) FROM trajectories").scalar_one() == 6
            body = conn.exec_driver_sql("SELECT body FROM steps WHERE trajectory_id = 'traj_s'").scalar_one()
    choice = msgspec.json.decode(body)["choices"][0]
    assert choice["message"]["content"] == "It shipped."
