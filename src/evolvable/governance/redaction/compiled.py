"""Build the compiled redaction modules (mypyc) that `native` loads by default, and say which build runs.

    python -m evolvable.governance.redaction.compiled build [--force]   # (re)build if the sources changed
    python -m evolvable.governance.redaction.compiled status            # the engine a process would use, and why

Kept apart from `native` (which the package imports on every start) so building needs mypy only here.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

from evolvable.governance.redaction.native import (
    BUILD_DIR,
    COMPILED_MODULES,
    GROUP,
    MANIFEST,
    PACKAGE,
    CompiledState,
    build_key,
    check,
    unusable,
)

log = logging.getLogger(__name__)


def build(build_dir: Path = BUILD_DIR, *, force: bool = False) -> CompiledState:
    """Compile the hot modules with mypyc into `build_dir`, replaced whole and only after a complete build."""
    if not force and unusable(build_dir) is None:
        return CompiledState(True, "compiled build is current")
    try:
        from mypyc.build import mypycify
        from setuptools import setup  # type: ignore[import-untyped]
    except ImportError as exc:
        raise SystemExit(f"error: the compiled build needs mypy and setuptools (the `native` extra): {exc}") from exc
    package_dir = Path(__file__).parent
    sources = [str(package_dir / f"{module}.py") for module in COMPILED_MODULES]
    # The project's mypy configuration (and its cache) where there is one; otherwise mypy's defaults.
    project = Path(__file__).parents[4]
    config = project / "pyproject.toml"
    options = ["--config-file", str(config)] if config.is_file() else ["--ignore-missing-imports"]
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="evolvable-compiled-") as tmp:
        work = Path(tmp)
        with contextlib.chdir(project if config.is_file() else work):
            extensions = mypycify([*options, *sources], opt_level="3", target_dir=str(work / "c"), group_name=GROUP)
        setup(
            name="evolvable-redaction-compiled",
            ext_modules=extensions,
            script_args=["-q", "build_ext", "--build-lib", str(work / "lib"), "--build-temp", str(work / "obj")],
        )
        staged = _stage(work / "lib" / Path(*PACKAGE.split(".")), work / "staged")
        if build_dir.exists():
            shutil.rmtree(build_dir)
        shutil.move(str(staged), build_dir)
    seconds = time.monotonic() - started
    log.info("compiled redaction build ready in %.0f s", seconds)
    return CompiledState(True, f"built in {seconds:.0f} s")


def _stage(built: Path, staged: Path) -> Path:
    """The extensions plus a manifest of what they were built from, checked before anything is replaced."""
    staged.mkdir()
    for library in built.glob(f"*{sysconfig.get_config_var('EXT_SUFFIX')}"):
        shutil.copy2(library, staged / library.name)
    manifest = {**build_key(), "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    (staged / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    reason = unusable(staged)
    if reason is not None:
        raise SystemExit(f"error: the compiled build is unusable: {reason}")
    return staged


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    command = args[0] if args else "status"
    if command == "build" and set(args[1:]) <= {"--force"}:
        logging.basicConfig(level=logging.INFO, format="%(message)s")
        print(f"compiled redaction: {build(force='--force' in args).reason}", flush=True)
        # mypy left gigabytes of objects behind: tearing them down takes minutes, so leave as mypy itself does
        os._exit(0)
    if command == "status" and len(args) == 1:
        current = check()
        print(f"redaction engine: {current.engine} ({current.reason})")
        return 0
    print("usage: python -m evolvable.governance.redaction.compiled [build [--force] | status]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
