"""The forked writer process keeps the heap it inherits out of the cyclic garbage collector."""

from __future__ import annotations

import gc
import json
import time
from pathlib import Path
from typing import Any

from evolvable.proxy.writer import WriterRunner


class _ReportingWriter:
    """Stands in for BackgroundWriter in the child: reports what the collector tracks there, then stops."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.store = self
        self.governor = None

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
