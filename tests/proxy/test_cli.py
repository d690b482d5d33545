"""`evolvable serve` refuses bad input with a message, never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def _serve(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "evolvable.cli.main", "serve", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
    )


def test_serve_rejects_bad_input(tmp_path: Path) -> None:
    no_upstream = _serve("--db", f"sqlite:///{tmp_path / 'x.db'}", cwd=tmp_path)
    assert no_upstream.returncode == 2 and "no upstream configured" in no_upstream.stderr
    missing = _serve("--config", str(tmp_path / "nope.yaml"), cwd=tmp_path)
    assert missing.returncode == 2 and "cannot read config" in missing.stderr
    (tmp_path / "bad.yaml").write_text(
        "upstreams:\n  - {name: a, base_url: 'http://a', api_key_env: EVOLVABLE_NO_SUCH_VAR}\n"
    )
    unset = _serve("--config", str(tmp_path / "bad.yaml"), cwd=tmp_path)
    assert unset.returncode == 2 and "EVOLVABLE_NO_SUCH_VAR" in unset.stderr
    for result in (no_upstream, missing, unset):
        assert "Traceback" not in result.stderr
