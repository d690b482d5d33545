"""`benchmarks/serving_ablation.py` and its probe: each ablation takes out exactly the piece it names (or the
figures would book one piece's cost to another), unknown names are refused, and the summary's arithmetic holds."""

from __future__ import annotations

import asyncio
import importlib.util
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest
from tests.benchmarks.loading import BENCHMARKS, load_benchmark

from evolvable.proxy import app as proxy_app
from evolvable.proxy import metrics, records, slow_clients
from evolvable.proxy import writer as writer_module
from evolvable.proxy.runtime import ProxyRuntime
from evolvable.proxy.spool import Spool
from evolvable.proxy.writer import BackgroundWriter
from evolvable.store import engine as store_engine


def _probe(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    # whatever an ablation replaces is put back after the test
    monkeypatch.setattr(ProxyRuntime, "spool_record", ProxyRuntime.spool_record)
    monkeypatch.setattr(metrics, "observed", metrics.observed)
    monkeypatch.setattr(proxy_app, "observed", proxy_app.observed)
    arm = slow_clients.DeadlineHttpToolsProtocol._arm_read_deadline
    monkeypatch.setattr(slow_clients.DeadlineHttpToolsProtocol, "_arm_read_deadline", arm)
    monkeypatch.setattr(BackgroundWriter, "cycle", BackgroundWriter.cycle)
    monkeypatch.setattr(BackgroundWriter, "run", BackgroundWriter.run)
    monkeypatch.setattr(writer_module, "_child_main", writer_module._child_main)
    monkeypatch.setattr(BackgroundWriter, "_apply_together", BackgroundWriter._apply_together)
    monkeypatch.setattr(store_engine._Checkpointer, "nudge", store_engine._Checkpointer.nudge)
    monkeypatch.delenv("EVOLVABLE_ABLATE", raising=False)
    probe = BENCHMARKS / "serving_ablation" / "sitecustomize.py"
    spec = importlib.util.spec_from_file_location("serving_ablation_probe", probe)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_each_ablation_replaces_only_its_piece(monkeypatch: pytest.MonkeyPatch) -> None:
    probe = _probe(monkeypatch)
    spool_record, observed = ProxyRuntime.spool_record, proxy_app.observed
    arm = slow_clients.DeadlineHttpToolsProtocol._arm_read_deadline

    probe.install({"metrics"})
    assert proxy_app.observed is not observed and metrics.observed is proxy_app.observed
    assert ProxyRuntime.spool_record is spool_record
    assert slow_clients.DeadlineHttpToolsProtocol._arm_read_deadline is arm

    probe.install({"read-deadline"})
    assert slow_clients.DeadlineHttpToolsProtocol._arm_read_deadline is not arm
    assert ProxyRuntime.spool_record is spool_record

    encoded: list[object] = []
    monkeypatch.setattr(records, "encode", lambda record: encoded.append(record) or b"{}")
    probe.install({"spool-write"})
    assert asyncio.run(ProxyRuntime.spool_record(None, "a record")) is True  # type: ignore[arg-type]
    assert encoded == ["a record"]  # made into spool bytes, not written

    cycle = BackgroundWriter.cycle
    probe.install({"writer"})
    assert BackgroundWriter.cycle is not cycle and BackgroundWriter.cycle(None) == 0  # type: ignore[arg-type]
    assert slow_clients.DeadlineHttpToolsProtocol._arm_read_deadline is not arm

    apply_together, nudge = BackgroundWriter._apply_together, store_engine._Checkpointer.nudge
    probe.install({"wal-checkpoint"})
    assert store_engine._Checkpointer.nudge is not nudge and BackgroundWriter._apply_together is apply_together

    governed: list[object] = []

    class Governor:
        def govern(self, events: list[object], runs: dict[str, object]) -> list[object]:
            governed.extend(events)
            return events

    class Record:
        trajectory_id = "traj_1"

        def run(self) -> None:
            return None

    class Item:
        record, events = Record(), ["start", "step"]

    class Writer:
        governor = Governor()

    probe.install({"store"})
    BackgroundWriter._apply_together(Writer(), [Item()])  # type: ignore[arg-type]
    assert governed == ["start", "step"]  # governed as usual, stored nowhere (the fake has no store)

    child_main = writer_module._child_main
    probe.install({"writer-group"})
    assert writer_module._child_main is not child_main  # (what it does runs in a forked child: not called here)

    probe.install({"capture"})
    assert asyncio.run(ProxyRuntime.spool_record(None, "another")) is True  # type: ignore[arg-type]
    assert encoded == ["a record"]  # not even encoded


def test_the_spinning_writer_reads_and_checkpoints_what_it_stands_in_for(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    probe = _probe(monkeypatch)
    monkeypatch.setenv("EVOLVABLE_SPIN_US", "1")
    cycle, apply_together = BackgroundWriter.cycle, BackgroundWriter._apply_together
    probe.install({"writer-spin"})
    assert BackgroundWriter.cycle is not cycle and BackgroundWriter._apply_together is apply_together
    with Spool(tmp_path / "spool", fsync="none") as spool:
        for n in range(5):
            assert spool.append_nowait(f"record {n}".encode())
        assert spool.wait_written(5, 10) is not None
        writer = SimpleNamespace(reader=spool.reader, batch_size=3)
        assert BackgroundWriter.cycle(writer) == 3  # type: ignore[arg-type]
        assert BackgroundWriter.cycle(writer) == 2  # type: ignore[arg-type]
        assert BackgroundWriter.cycle(writer) == 0  # type: ignore[arg-type]
        assert spool.reader.read(spool.reader.load_checkpoint(), 10)[0] == []


def test_the_short_slice_is_asked_for_before_the_writer_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    probe = _probe(monkeypatch)
    calls: list[object] = []
    monkeypatch.setattr(BackgroundWriter, "run", lambda self, should_stop: calls.append("run"))
    monkeypatch.setattr(probe, "set_slice", lambda runtime_ns: calls.append(runtime_ns))
    probe.install({"writer-slice"})
    BackgroundWriter.run(None, lambda: True)  # type: ignore[arg-type]
    assert calls == [probe.SLICE_NS, "run"]


def test_an_unknown_piece_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(SystemExit, match="unknown pieces"):
        _probe(monkeypatch).install({"capture", "everything"})


def test_the_summary_compares_each_target_with_the_floor_and_the_whole_proxy() -> None:
    ablation = load_benchmark("serving_ablation")
    targets = [ablation.FLOOR, ablation.EVOLVABLE, "evolvable without capture"]

    def cell(cpu: float) -> dict[str, float]:
        figures = {key: 0.5 for key in ablation.FIGURES}
        return {**figures, "cpu_us_per_call": cpu, "p50_ms": 1.0, "p99_ms": 2.0, "calls": 100}

    rounds = [
        {ablation.FLOOR: {"1": cell(100)}, ablation.EVOLVABLE: {"1": cell(180)}, targets[2]: {"1": cell(150)}},
        {ablation.FLOOR: {"1": cell(120)}, ablation.EVOLVABLE: {"1": cell(160)}, targets[2]: {"1": cell(140)}},
        {ablation.FLOOR: {"1": cell(110)}, ablation.EVOLVABLE: {"1": cell(170)}, targets[2]: {"1": cell(130)}},
    ]
    summary = ablation.summarize(rounds, targets, [1])["1"]
    assert summary[ablation.FLOOR]["cpu_us_per_call"] == 110
    assert summary[ablation.EVOLVABLE]["over_floor_us"] == 60
    assert summary[targets[2]]["saved_us"] == 30
    assert summary[targets[2]]["cpu_us_rounds"] == [150, 140, 130]


def test_targets_say_whether_a_piece_is_taken_out_or_changed() -> None:
    ablation = load_benchmark("serving_ablation")
    assert ablation._targets(["capture", "writer-group"]) == {
        ablation.FLOOR: None,
        ablation.EVOLVABLE: "",
        "evolvable without capture": "capture",
        "evolvable with writer-group": "writer-group",
    }
