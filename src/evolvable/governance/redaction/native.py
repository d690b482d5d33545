"""The compiled build of the redaction engine's hot modules, used by default when it is present and current.

mypyc compiles the type-annotated recognizer modules to C extensions: same code, same findings, ~1.3-1.6x the
throughput (docs/PERFORMANCE.md). `scripts/setup.sh` builds them into `_native/` beside this file; the package's
`__init__` then puts that directory first on its `__path__`, so `import ...redaction.names` loads the extension.
A build whose recorded source digest or interpreter ABI differs from the running one is never loaded (it would
run old code): the Python modules run instead, with a warning. `EVOLVABLE_REDACTION_COMPILED=0` turns it off.

    python -m evolvable.governance.redaction.native build     # (re)build if the sources changed
    python -m evolvable.governance.redaction.native status    # which build this process would use, and why
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

PACKAGE = "evolvable.governance.redaction"
# The modules where a pass spends its time; the engine, events and stream stay Python (they build objects
# through slot descriptors and are patched in tests).
COMPILED_MODULES = ("findings", "validators", "recognizers", "phones", "addresses", "names")
# One shared library for the group, named inside the package so the shims find it through `__path__` too.
GROUP = f"{PACKAGE}._compiled"
BUILD_DIR = Path(__file__).with_name("_native")
MANIFEST = "manifest.json"
SWITCH = "EVOLVABLE_REDACTION_COMPILED"


@dataclass(frozen=True)
class CompiledState:
    """Whether this process runs the compiled modules, and why (shown by `status` and the proxy's status)."""

    active: bool
    reason: str

    @property
    def engine(self) -> str:
        return "compiled" if self.active else "python"


_state = CompiledState(False, "not activated")


def state() -> CompiledState:
    return _state


def source_digest(package_dir: Path | None = None) -> str:
    """SHA-256 over the compiled modules' sources: a build is current only for exactly these bytes."""
    package_dir = package_dir or Path(__file__).parent
    digest = hashlib.sha256()
    for module in COMPILED_MODULES:
        digest.update(module.encode() + b"\0")
        digest.update((package_dir / f"{module}.py").read_bytes())
    return digest.hexdigest()


def _build_key() -> dict[str, str]:
    return {
        "sources": source_digest(),
        "ext_suffix": sysconfig.get_config_var("EXT_SUFFIX") or "",
        "python": sys.implementation.cache_tag or "",
    }


def _read_manifest(build_dir: Path) -> dict[str, str] | None:
    try:
        data = json.loads((build_dir / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _unusable(build_dir: Path) -> str | None:
    """Why the build in `build_dir` must not run for these sources under this interpreter (None: it may)."""
    manifest = _read_manifest(build_dir)
    if manifest is None:
        return "no compiled build (python -m evolvable.governance.redaction.native build)"
    key = _build_key()
    for field, current in key.items():
        if manifest.get(field) != current:
            return f"compiled build is stale ({field} changed); rebuild it"
    missing = [m for m in COMPILED_MODULES if not (build_dir / f"{m}{key['ext_suffix']}").is_file()]
    if missing:
        return f"compiled build is incomplete (missing {', '.join(missing)})"
    return None


def check(build_dir: Path = BUILD_DIR) -> CompiledState:
    """Whether the build in `build_dir` may be loaded by this interpreter for the current sources."""
    if os.environ.get(SWITCH, "1").strip().lower() in {"0", "false", "no", "off"}:
        return CompiledState(False, f"turned off by {SWITCH}")
    reason = _unusable(build_dir)
    if reason is not None:
        return CompiledState(False, reason)
    return CompiledState(True, f"compiled build of {(_read_manifest(build_dir) or {}).get('built_at', '?')}")


def activate(package: str = PACKAGE, build_dir: Path = BUILD_DIR) -> CompiledState:
    """Put a current compiled build first on the package's `__path__`; call before importing its modules."""
    global _state
    _state = check(build_dir)
    if _state.active:
        path = sys.modules[package].__path__
        if str(build_dir) not in path:
            path.insert(0, str(build_dir))
    elif _read_manifest(build_dir) is not None:
        log.warning("redaction runs its Python modules: %s", _state.reason)
    return _state


def build(build_dir: Path = BUILD_DIR, *, force: bool = False) -> CompiledState:
    """Compile the hot modules with mypyc into `build_dir` (replaced whole, only after a complete build)."""
    if not force and _unusable(build_dir) is None:
        return CompiledState(True, "compiled build is current")
    try:
        from mypyc.build import mypycify
        from setuptools import setup
    except ImportError as exc:
        raise SystemExit(f"error: the compiled build needs mypy and setuptools (the `native` extra): {exc}") from exc
    package_dir = Path(__file__).parent
    sources = [str(package_dir / f"{module}.py") for module in COMPILED_MODULES]
    # The project's mypy configuration (and cache) where there is one; otherwise mypy's defaults.
    project = Path(__file__).parents[4]
    config = project / "pyproject.toml"
    options = ["--config-file", str(config)] if config.is_file() else ["--ignore-missing-imports"]
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="evolvable-native-") as tmp:
        work = Path(tmp)
        with contextlib.chdir(project if config.is_file() else work):
            extensions = mypycify([*options, *sources], opt_level="3", target_dir=str(work / "c"), group_name=GROUP)
        setup(
            name="evolvable-redaction-compiled",
            ext_modules=extensions,
            script_args=["-q", "build_ext", "--build-lib", str(work / "lib"), "--build-temp", str(work / "obj")],
        )
        built = work / "lib" / Path(*PACKAGE.split("."))
        staged = work / "staged"
        staged.mkdir()
        for library in built.glob(f"*{sysconfig.get_config_var('EXT_SUFFIX')}"):
            shutil.copy2(library, staged / library.name)
        manifest = {**_build_key(), "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        (staged / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        reason = _unusable(staged)
        if reason is not None:
            raise SystemExit(f"error: the compiled build is unusable: {reason}")
        if build_dir.exists():
            shutil.rmtree(build_dir)
        shutil.move(str(staged), build_dir)
    log.info("compiled redaction build ready in %.0f s", time.monotonic() - started)
    return CompiledState(True, f"built in {time.monotonic() - started:.0f} s")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    command = args[0] if args else "status"
    if command == "build":
        result = build(force="--force" in args)
        print(f"compiled redaction: {result.reason}")
        return 0
    if command == "status":
        current = check()
        print(f"redaction engine: {current.engine} ({current.reason})")
        return 0
    print("usage: python -m evolvable.governance.redaction.native [build [--force] | status]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
