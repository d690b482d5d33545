"""The compiled build of the redaction engine's hot modules, used by default when it is present and current.

mypyc compiles the type-annotated recognizer modules to C extensions: same code, same findings, 1.2-1.5x the
throughput (docs/PERFORMANCE.md). `scripts/setup.sh` builds them into `_native/` beside this file; the package's
`__init__` then puts that directory first on its `__path__`, so `import ...redaction.names` loads the extension.
A build whose recorded source digest or interpreter ABI differs from the running one is never loaded (it would
run old code): the Python modules run instead, with a warning. `EVOLVABLE_REDACTION_COMPILED=0` turns it off.

    python -m evolvable.governance.redaction.compiled build     # (re)build if the sources changed
    python -m evolvable.governance.redaction.compiled status    # which build this process would use, and why
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

PACKAGE = "evolvable.governance.redaction"
# The modules where a pass spends its time, and `events`, the capture writer's walk over each event's fields (its
# glue cost the writer more than the engine's scans: 1.2-1.6x less governing CPU per call compiled, docs/PERFORMANCE.md
# session 12). Stream stays Python: it runs per chunk on the request path, where its calls are into the engine.
COMPILED_MODULES = ("findings", "validators", "recognizers", "phones", "addresses", "names", "engine", "events")
# One shared library for the group, named inside the package so the shims find it through `__path__` too.
GROUP = f"{PACKAGE}._compiled"
BUILD_DIR = Path(__file__).with_name("_native")
MANIFEST = "manifest.json"
SWITCH = "EVOLVABLE_REDACTION_COMPILED"


@dataclass(frozen=True)
class CompiledState:
    """Whether this process runs the compiled modules, and why (shown by `status` and benchmarks/redaction.py)."""

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


def build_key() -> dict[str, str]:
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


def unusable(build_dir: Path) -> str | None:
    """Why the build in `build_dir` must not run for these sources under this interpreter (None: it may)."""
    manifest = _read_manifest(build_dir)
    if manifest is None:
        return "no compiled build (python -m evolvable.governance.redaction.compiled build)"
    key = build_key()
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
    reason = unusable(build_dir)
    return CompiledState(reason is None, reason or "compiled build matches its sources and this interpreter")


def activate(package: str = PACKAGE, build_dir: Path = BUILD_DIR) -> CompiledState:
    """Put a current compiled build first on the package's `__path__`; call before importing its modules."""
    global _state
    _state = check(build_dir)
    if _state.active:
        path = sys.modules[package].__path__
        if str(build_dir) not in path:
            path.insert(0, str(build_dir))
    elif (build_dir / MANIFEST).exists():  # a build is there but may not run: say why
        log.warning("redaction runs its Python modules: %s", _state.reason)
    return _state
