"""`benchmarks/writer_backlog.py`: the writer drains the whole backlog it is timed on, and says what it read."""

from __future__ import annotations

from tests.benchmarks.loading import load_benchmark


def test_the_writer_applies_every_spooled_record_and_reads_each_about_once() -> None:
    figures = load_benchmark("writer_backlog").drain_backlog(4000)  # (8 MB of spool; not a whole number of batches)
    assert figures["us_per_record"] > 0
    # each record's 2 kB once, plus at most a read chunk per batch: re-reading the rest of the segment for every
    # batch (as before chunked reads) read 12 kB per record here
    assert 1.5 < figures["kb_read_per_record"] < 9


def test_a_small_batch_size_makes_that_many_records_per_cycle_and_stores_them_all() -> None:
    figures = load_benchmark("writer_backlog").drain_backlog(300, batch=7)  # (raises unless all 300 are stored)
    assert figures["cycles"] == 43  # 300 / 7, rounded up
