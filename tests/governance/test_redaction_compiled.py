"""The compiled redaction build (mypyc, `evolvable.governance.redaction.native`) is what runs by default, finds
exactly what the Python modules find, and is never loaded when it does not match the sources it was built from.

`scripts/setup.sh` builds it wherever a C compiler exists, so on such a machine (CI included) a missing or
unloadable build is a failure here, not a skip.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from evolvable.governance.redaction import events, names, native, recognizers

ROOT = Path(__file__).resolve().parents[2]
EVENTS_SIDE = Path(__file__).with_name("event_walk_side.py")
EXT_SUFFIX = sysconfig.get_config_var("EXT_SUFFIX")

# Each side redacts the same generated corpora in its own process and prints findings and redacted texts.
_SIDE = """
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("broad", {broad!r})
broad = importlib.util.module_from_spec(spec); spec.loader.exec_module(broad)
from evolvable.governance.redaction import PlaceholderMap, RedactionEngine, native, names
engine = RedactionEngine()
records = broad.generate("tuned", 400, 7) + broad.generate("heldout", 400, 8) + (broad.public_corpus(300, 9) or [])
placeholders = PlaceholderMap()
rows = []
for r in records:
    result = engine.redact(r["text"], placeholders)
    rows.append([[list(f) for f in result.findings], result.text])
print(json.dumps({{"engine": native.state().engine, "module": names.__file__, "rows": rows}}))
"""


def _side(compiled: bool, script: Path | None = None) -> dict[str, object]:
    """`script` (a path, run with the corpus module's path), else `_SIDE`, in a process of its own."""
    broad = str(ROOT / "benchmarks" / "corpus" / "broad.py")
    command = [str(script), broad] if script is not None else ["-c", _SIDE.format(broad=broad)]
    env = {**os.environ, native.SWITCH: "1" if compiled else "0", "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, *command], env=env, check=True, capture_output=True, text=True)
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def test_setup_built_the_compiled_modules_and_they_are_what_runs() -> None:
    if shutil.which("cc") is None:
        pytest.skip("no C compiler here: setup.sh leaves redaction on its Python modules")
    if os.environ.get(native.SWITCH, "1") == "0":
        pytest.skip(f"{native.SWITCH}=0 in this run")
    assert native.state().active, native.state().reason
    for module in (names, recognizers, events):
        assert module.__file__ is not None and module.__file__.endswith(EXT_SUFFIX), module.__file__


def test_compiled_and_python_modules_find_exactly_the_same() -> None:
    if not native.check().active:
        pytest.skip(f"no compiled build to compare: {native.check().reason}")
    compiled, python = _side(compiled=True), _side(compiled=False)
    assert compiled["engine"] == "compiled" and str(compiled["module"]).endswith(EXT_SUFFIX)
    assert python["engine"] == "python" and str(python["module"]).endswith(".py")
    rows_compiled, rows_python = compiled["rows"], python["rows"]
    assert isinstance(rows_compiled, list) and isinstance(rows_python, list)
    assert len(rows_compiled) >= 800
    assert sum(len(row[0]) for row in rows_python) > 800  # the corpora are full of findings
    differing = [i for i, (a, b) in enumerate(zip(rows_compiled, rows_python, strict=True)) if a != b]
    assert differing == [], f"{len(differing)} records differ, first: {rows_compiled[differing[0]]}"


def test_compiled_and_python_event_walks_store_exactly_the_same() -> None:
    if not native.check().active:
        pytest.skip(f"no compiled build to compare: {native.check().reason}")
    compiled, python = _side(True, EVENTS_SIDE), _side(False, EVENTS_SIDE)
    assert str(compiled["module"]).endswith(EXT_SUFFIX) and str(python["module"]).endswith(".py")
    stored_compiled, stored_python = compiled["events"], python["events"]
    assert isinstance(stored_compiled, list) and isinstance(stored_python, list) and len(stored_python) == 400
    assert sum("<" in json.dumps(e) for e in stored_python) > 300  # placeholders in most events: the walk redacted
    differing = [i for i, (a, b) in enumerate(zip(stored_compiled, stored_python, strict=True)) if a != b]
    assert differing == [], f"{len(differing)} events differ, first: {stored_compiled[differing[0]]}"


def _fake_build(directory: Path, **override: str) -> Path:
    directory.mkdir()
    for module in native.COMPILED_MODULES:
        (directory / f"{module}{EXT_SUFFIX}").write_bytes(b"")
    manifest = {
        "sources": native.source_digest(),
        "ext_suffix": EXT_SUFFIX,
        "python": sys.implementation.cache_tag,
        "built_at": "2026-01-01T00:00:00Z",
    }
    (directory / native.MANIFEST).write_text(json.dumps({**manifest, **override}))
    return directory


def test_a_build_of_other_sources_or_another_interpreter_is_never_loaded(tmp_path: Path) -> None:
    assert native.check(_fake_build(tmp_path / "current")).active
    stale = native.check(_fake_build(tmp_path / "edited", sources="0" * 64))
    assert not stale.active and "stale (sources changed)" in stale.reason
    other_abi = native.check(_fake_build(tmp_path / "abi", ext_suffix=".cpython-399-x86_64-linux-gnu.so"))
    assert not other_abi.active and "ext_suffix" in other_abi.reason
    incomplete = _fake_build(tmp_path / "incomplete")
    (incomplete / f"names{EXT_SUFFIX}").unlink()
    assert "missing names" in native.check(incomplete).reason
    assert "no compiled build" in native.check(tmp_path / "absent").reason


def test_a_stale_build_leaves_the_package_path_alone_and_says_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = type(sys)("fake_redaction_package")
    package.__path__ = ["/python/modules"]  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "fake_redaction_package", package)
    saved = native.state()
    try:
        with caplog.at_level(logging.WARNING, logger=native.__name__):
            state = native.activate("fake_redaction_package", _fake_build(tmp_path / "b", sources="f" * 64))
        assert not state.active and package.__path__ == ["/python/modules"]  # type: ignore[attr-defined]
        assert "runs its Python modules" in caplog.text and "stale" in caplog.text
        current = native.activate("fake_redaction_package", _fake_build(tmp_path / "c"))
        assert current.active and package.__path__[0] == str(tmp_path / "c")  # type: ignore[attr-defined]
        monkeypatch.setenv(native.SWITCH, "0")
        assert native.check(tmp_path / "c").reason == f"turned off by {native.SWITCH}"
    finally:
        native._state = saved


def test_the_digest_covers_every_compiled_module(tmp_path: Path) -> None:
    package = Path(native.__file__).parent
    copy = tmp_path / "redaction"
    copy.mkdir()
    for module in native.COMPILED_MODULES:
        shutil.copy(package / f"{module}.py", copy / f"{module}.py")
    assert native.source_digest(copy) == native.source_digest()
    for module in native.COMPILED_MODULES:
        original = (copy / f"{module}.py").read_bytes()
        (copy / f"{module}.py").write_bytes(original + b"\n# edited\n")
        assert native.source_digest(copy) != native.source_digest(), module
        (copy / f"{module}.py").write_bytes(original)


def test_status_command_names_the_engine_in_use() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "evolvable.governance.redaction.compiled", "status"],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, native.SWITCH: "0"},
    ).stdout
    assert out.startswith("redaction engine: python (turned off by EVOLVABLE_REDACTION_COMPILED)")
    bad = subprocess.run(
        [sys.executable, "-m", "evolvable.governance.redaction.compiled", "rebuild-everything"],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "usage:" in bad.stderr and "Traceback" not in bad.stderr
