"""The CLI against a real store: status, decisions, harness show/diff/restore, rollout, approve."""

from __future__ import annotations

import json

from tests.control.conftest import AGENT, base_harness, make_trajectory
from typer.testing import CliRunner

from evolvable.cli.main import app
from evolvable.control.models import DecisionState, Lever, VersionKind, VersionState
from evolvable.control.runtime import ControlPlane
from evolvable.store import Store

runner = CliRunner()


def test_cli_end_to_end(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    store = Store.open(url)
    plane = ControlPlane(store)
    active, _ = plane.bootstrap(base_harness())
    store.put_trajectory(make_trajectory(cluster="refund", success=True, harness_version=active.id))
    cand = plane.registry.register_harness(base_harness().model_copy(update={"system_prompt": "Be precise."}))
    decision = plane.journal.record_decision(
        AGENT, Lever.prompt, state=DecisionState.awaiting_approval, rationale="broad failures", requires_approval=True
    )
    plane.journal.update_decision(
        decision.id, candidate_kind=VersionKind.harness, candidate_version=cand.id, baseline_version=active.id
    )

    out = runner.invoke(app, ["status", "--db", url])
    assert out.exit_code == 0 and active.id in out.output and "100%" in out.output
    data = json.loads(runner.invoke(app, ["status", "--db", url, "--json"]).output)
    assert data[AGENT]["runs"] == 1
    listed = json.loads(runner.invoke(app, ["decisions", "--db", url, "--json"]).output)
    assert listed[0]["id"] == decision.id and listed[0]["lever"] == "prompt"
    table = runner.invoke(app, ["decisions", "--db", url]).output
    assert "prompt" in table
    # The whole id, which `approve` takes (its first digits are only the time it was made), folded if need be.
    assert decision.id in "".join(line.split("\u2502")[1].strip() for line in table.splitlines() if "\u2502" in line)

    shown = json.loads(runner.invoke(app, ["harness", "show", AGENT, "--db", url]).output)
    assert shown["version"] == active.id and shown["state"] == "active"
    diff = runner.invoke(app, ["harness", "diff", AGENT, "active", cand.id[:12], "--db", url])
    assert diff.exit_code == 0 and "+Be precise." in diff.output

    approved = runner.invoke(app, ["approve", decision.id, "--db", url])
    assert approved.exit_code == 0 and "canary" in approved.output
    rollout_id = plane.journal.decision(decision.id).rollout_id
    promoted = runner.invoke(app, ["rollout", "promote", rollout_id, "--db", url])
    assert promoted.exit_code == 0
    assert plane.registry.current(AGENT, VersionKind.harness, VersionState.active).id == cand.id
    rolled = runner.invoke(app, ["rollout", "rollback", decision.id, "--db", url])  # a decision id finds its rollout
    assert rolled.exit_code == 0 and active.id in rolled.output
    assert plane.registry.current(AGENT, VersionKind.harness, VersionState.active).id == active.id
    restored = runner.invoke(app, ["harness", "restore", AGENT, cand.id, "--db", url])
    assert restored.exit_code == 0
    assert plane.registry.current(AGENT, VersionKind.harness, VersionState.active).id == cand.id
    store.close()


def test_cli_errors_are_messages_not_tracebacks(tmp_path) -> None:
    import subprocess
    import sys
    from pathlib import Path

    url = f"sqlite:///{tmp_path / 'cli.db'}"
    exe = Path(sys.executable).with_name("evolvable")
    result = subprocess.run([str(exe), "rollout", "promote", "ro_missing", "--db", url], capture_output=True, text=True)
    assert result.returncode == 2 and "no rollout" in result.stderr and "Traceback" not in result.stderr
