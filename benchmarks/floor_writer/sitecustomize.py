"""An experiment, not a writer: `evolvable serve` whose capture writer applies each batch the way
`writer_floor.py`'s checked floor does (plain data, the same tables, the checks a redesign must keep), so that
`proxy_overhead.py` can measure end to end what a writer redesigned to that shape would give.

Put this directory on PYTHONPATH of the proxy under test; `proxy_overhead.py` does it for its baseline:

    .venv/bin/python benchmarks/proxy_overhead.py --skip-litellm --no-wire --baseline-src benchmarks/floor_writer

(the "evolvable baseline" rows are then the floor writer; `evolvable` itself still comes from this checkout).
Like the floor it stores only what that benchmark sends, one-call chat records (a stream's reply assembled
first): no sessions, tools, token ids or tenant policy. Session 14 in docs/PERFORMANCE.md has its results.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Any


def install() -> None:
    """Replace `BackgroundWriter.cycle` with one that applies each batch through the checked floor."""
    from evolvable.proxy import writer
    from evolvable.proxy.capture import assemble_stream
    from evolvable.proxy.records import decode

    benchmarks = str(Path(__file__).resolve().parents[1])
    if benchmarks not in sys.path:
        sys.path.insert(0, benchmarks)
    import writer_floor

    def decode_assembled(payload: bytes) -> Any:
        record = decode(payload)
        if getattr(record, "reply", None) is None and getattr(record, "sse", None) is not None:
            record.reply = assemble_stream(record.sse)  # type: ignore[union-attr]
        return record

    def cycle(self: Any) -> int:
        with self.reader.cycle_lock():
            start = self.reader.load_checkpoint()
            payloads, nxt = self.reader.read(start, self.batch_size)
            if payloads:
                apply = self.__dict__.get("_floor_apply")
                if apply is None:
                    apply = self._floor_apply = writer_floor.floor(self.store, checked=True, decode=decode_assembled)
                apply(payloads)
                self.stats.applied(len(payloads), 2 * len(payloads))  # (events: a start and a step per call)
            if payloads or nxt != start:
                self.reader.save_checkpoint(nxt)
            return len(payloads)

    writer.BackgroundWriter.cycle = cycle  # type: ignore[method-assign]


if __name__ == "sitecustomize":  # imported at start-up (a test calls `install` itself)
    with contextlib.suppress(ImportError):  # a process without evolvable (a helper's interpreter): nothing to do
        install()
