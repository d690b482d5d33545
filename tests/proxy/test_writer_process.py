"""The forked writer process keeps the heap it inherits out of the cyclic garbage collector."""

from __future__ import annotations

import gc
import json
import time
from pathlib import Path
from typing import Any

from evolvable.proxy.writer import Waker, WriterRunner


class _ReportingWriter:
    """Stands in for BackgroundWriter in the child: reports what the collector tracks there, then stops."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.store = self
        self.governor = None
        self.waker = Waker()

    def run(self, should_stop: Any) -> None:
        self.out.write_text(json.dumps({"frozen": gc.get_freeze_count(), "tracked": len(gc.get_objects())}))
        while not should_stop():
            time.sleep(0.01)

    def close(self) -> None: ...


def test_the_writer_process_freezes_what_it_inherits(tmp_path: Path) -> None:
    out = tmp_path / "child.json"
    runner = WriterRunner(_ReportingWriter(out), mode="process", nice=0)  # type: ignore[arg-type]
    runner.start()
    try:
        deadline = time.monotonic() + 30
        while not out.exists() or not out.read_text():
            assert time.monotonic() < deadline, "the writer process did not report"
            time.sleep(0.02)
    finally:
        runner.stop(timeout_s=10)
    report = json.loads(out.read_text())
    inherited = len(gc.get_objects())
    assert report["frozen"] >= inherited // 2  # the parent's objects: never traversed in the child
    assert report["tracked"] < inherited // 10  # what the child's collections still look at


class _GcRecordingGovernor:
    """Passes events through and notes, per batch, whether the cyclic GC was on while the batch was governed."""

    def __init__(self, out: Path) -> None:
        self.out = out

    def govern(self, events: list[Any], runs: Any = None) -> list[Any]:
        with self.out.open("a") as log:
            log.write(json.dumps({"gc_on": gc.isenabled(), "events": len(events)}) + "\n")
        return events


def _stored(store: Any, trajectory_id: str) -> bool:
    from evolvable.errors import NotFound

    try:
        return store.get_header(trajectory_id) is not None
    except NotFound:
        return False


def test_the_forked_writer_applies_batches_with_the_gc_off_and_turns_it_on_between(tmp_path: Path) -> None:
    """Young collections over a batch's live containers cost the writer 5-12% of its CPU: it pauses the GC for
    the batch in its own process only (never in thread mode, where the GC is the serving process's)."""
    import orjson

    from evolvable.proxy.sessions import SessionManager
    from evolvable.proxy.spool import Spool, SpoolReader
    from evolvable.proxy.writer import BackgroundWriter, WriterStats
    from evolvable.store import Store

    spool_dir, out = tmp_path / "spool", tmp_path / "batches.jsonl"
    with Store.open(f"sqlite:///{tmp_path}/db.sqlite") as store:
        writer = BackgroundWriter(
            SpoolReader(spool_dir), store, _GcRecordingGovernor(out), SessionManager(store), WriterStats(), idle_s=0.01
        )
        runner = WriterRunner(writer, mode="process", nice=0)
        with Spool(spool_dir) as spool:
            runner.start()
            try:
                for i in range(3):
                    tid = f"traj_gc_{i}"
                    spool.append_nowait(orjson.dumps({"t": "session", "id": tid, "traj": tid, "at": 1.7e9}))
                    spool.wait_written(i + 1, 10)
                    deadline = time.monotonic() + 30
                    while not _stored(store, tid):
                        assert time.monotonic() < deadline, "the writer process did not apply the record"
                        time.sleep(0.02)
            finally:
                runner.stop(timeout_s=10)
        assert [_stored(store, f"traj_gc_{i}") for i in range(3)] == [True] * 3
    batches = [json.loads(line) for line in out.read_text().splitlines()]
    assert sum(b["events"] for b in batches) == 3 and [b["gc_on"] for b in batches] == [False] * len(batches)
    assert gc.isenabled()  # the parent's GC was never touched
    assert writer.pause_gc is False  # (set in the child only)
