"""The governance commands end to end through the real `evolvable` CLI, on both backends."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import orjson
from typer.testing import CliRunner

from evolvable.cli.main import app
from evolvable.governance.tenants import TenantDirectory
from evolvable.protocol.models import utcnow
from evolvable.store import Store, TrajectoryFilter

from .builders import make_trajectory

runner = CliRunner(env={"COLUMNS": "250"})


def run(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.output + (result.stderr if result.stderr_bytes else "")


def test_tenant_and_key_commands(store: Store, db_url: str) -> None:
    code, out = run("tenants", "init", "--tenant", "root", "--db", db_url)
    assert code == 0, out
    admin_key = re.search(r"(evk_\S+)", out)[1]
    assert TenantDirectory(store.engine).authenticate(admin_key).is_admin
    code, out = run(
        "tenants",
        "create",
        "acme",
        "--capture",
        "metadata",
        "--agent-capture",
        "hr=off",
        "--retention-days",
        "30",
        "--db",
        db_url,
    )
    assert code == 0 and "metadata" in out and "hr=off" in out, out
    code, out = run("tenants", "update", "acme", "--capture", "full", "--retention-days", "none", "--db", db_url)
    assert code == 0 and "keep" in out, out
    code, out = run("tenants", "issue-key", "acme", "--label", "bot", "--db", db_url)
    key_id = re.search(r"key id\s+(\S+)", out)[1]
    code, out = run("tenants", "keys", "acme", "--db", db_url)
    assert key_id in out and "evk_" not in out
    assert run("tenants", "revoke-key", key_id, "--db", db_url)[0] == 0
    code, out = run("tenants", "list", "--db", db_url)
    assert "acme" in out and "root" in out

    # Bad input: a clear message and a non-zero exit, never a traceback.
    for args in (
        ("tenants", "create", "acme"),
        ("tenants", "create", "x", "--capture", "sometimes"),
        ("tenants", "create", "y", "--retention-days", "-3"),
        ("tenants", "create", "z", "--agent-capture", "nonsense"),
        ("tenants", "update", "acme"),
        ("tenants", "issue-key", "nobody"),
        ("tenants", "revoke-key", "key_nope"),
    ):
        code, out = run(*args, "--db", db_url)
        assert code == 2 and "error" in out and "Traceback" not in out, (args, out)


def test_dataset_purge_retention_audit_commands(store: Store, db_url: str, tmp_path: Path) -> None:
    for i in range(3):
        store.put_trajectory(make_trajectory(end_user="erin", question=f"question number {i} about a lamp"))
    store.put_trajectory(make_trajectory(end_user="erin", question="question number 0 about a lamp"))  # exact dup
    old = make_trajectory(tenant_id="beta", started_at=utcnow() - timedelta(days=90), question="beta old")
    store.put_trajectory(old)

    code, out = run("dataset", "create", "lamps", "--filter", "tenant_id=acme", "--dedup", "exact", "--db", db_url)
    assert code == 0 and "lamps@1" in out, out
    assert re.search(r"lamps@1\s+│\s+acme\s+│\s+3\s+│\s+4", out), out
    out_file = tmp_path / "lamps.jsonl"
    code, out = run("dataset", "export", "lamps", "--format", "sft", "-o", str(out_file), "--db", db_url)
    assert code == 0, out
    assert len(out_file.read_bytes().splitlines()) == 3
    manifest = orjson.loads((tmp_path / "lamps.jsonl.manifest.json").read_bytes())
    assert manifest["harness_versions"] == {"h1-abc": 3}
    code, out = run("dataset", "list", "--db", db_url)
    assert "lamps@1" in out and "exported" in out
    for args in (
        ("dataset", "export", "lamps@7", "--format", "sft", "-o", str(tmp_path / "x")),
        ("dataset", "export", "lamps", "--format", "csv", "-o", str(tmp_path / "x")),
        ("dataset", "create", "x", "--filter", "colour=blue"),
        ("dataset", "create", "x", "--dedup", "fuzzy"),
        ("dataset", "create", "x", "--quality", "max_steps=lots"),
        ("purge",),
        ("retention", "run", "--now", "yesterday"),
        ("audit", "--action", "nonsense"),
    ):
        code, out = run(*args, "--db", db_url)
        assert code == 2 and "error" in out and "Traceback" not in out, (args, out)

    code, out = run("purge", "--user", "erin", "--yes", "--spool", str(tmp_path / "no-spool"), "--db", db_url)
    assert code == 0 and re.search(r"trajectories\s+│\s+4", out), out
    assert store.count(TrajectoryFilter(end_user="erin")) == 0
    code, out = run("dataset", "list", "--db", db_url)
    assert "invalidated" in out

    TenantDirectory(store.engine).create_tenant("beta", retention_days=30)
    code, out = run("retention", "run", "--db", db_url)
    assert code == 0 and "beta" in out, out
    assert store.count(TrajectoryFilter()) == 0

    code, out = run("audit", "--json", "--db", db_url)
    actions = [orjson.loads(line)["action"] for line in out.splitlines()]
    assert actions[:3] == ["retention", "policy_change", "purge"] and "export" in actions
    assert "erin" not in out
    code, out = run("audit", "--action", "export", "--since", "1h", "--db", db_url)
    assert code == 0 and "dataset:lamps@1" in out
