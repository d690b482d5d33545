"""`benchmarks/stream_assembly.py` assembles the streams it times into the replies they amount to."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.benchmarks.loading import load_benchmark

from evolvable.proxy.capture import assemble_stream


def test_the_long_stream_assembles_to_every_token_with_its_id_and_logprob() -> None:
    bench = load_benchmark("stream_assembly")
    (choice,) = assemble_stream(bench.long_stream(50))["choices"]
    assert choice["message"]["content"] == "".join(f"t{i} " for i in range(50))
    assert choice["token_ids"] == list(range(50)) and choice["_logprob_values"] == [-0.25] * 50
    assert choice["finish_reason"] == "stop"


def test_a_run_writes_what_it_measured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bench = load_benchmark("stream_assembly")
    monkeypatch.setattr(bench, "STREAMS", {"short": (bench.long_stream(5), 3), "long": (bench.long_stream(40), 2)})
    out = tmp_path / "streams.json"
    monkeypatch.setattr(bench, "spawn", lambda src: bench.run_worker())  # (a worker process would reload STREAMS)
    monkeypatch.setattr("sys.argv", ["stream_assembly.py", "--rounds", "1", "--results", str(out)])
    bench.main()
    written = json.loads(out.read_text())
    assert set(written["best"]["current"]) == {"short", "long"} and written["same_content"] is True
    assert all(us > 0 for us in written["best"]["current"].values())
    assert len(written["environment"]["load_average"]["speed_probe_ms"]) == 2
