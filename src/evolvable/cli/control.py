"""`evolvable status | decisions | rollout | harness | approve`: the control plane from a terminal."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

DB = typer.Option(None, "--db", help="Database URL (default: the embedded SQLite store).")
TENANT = typer.Option("default", "--tenant", help="The tenant whose agents, versions and decisions to act on.")


def _plane(db: str | None, tenant: str = "default") -> Any:
    from evolvable.control.runtime import ControlPlane
    from evolvable.store import Store

    return ControlPlane(Store.open(db), tenant=tenant)


def _console() -> Any:
    from rich.console import Console

    return Console()


def _judge_line(judge: dict[str, Any]) -> str:
    """'12 runs judged; agrees with outcomes on 75% of 4; success from judge 12, outcome 4'."""
    agreement = (
        f"agrees with outcomes on {judge['agreement']:.0%} of {judge['with_outcome']}"
        if judge.get("agreement") is not None
        else "no run has both an outcome and a judge score"
    )
    sources = ", ".join(f"{k} {v}" for k, v in sorted(judge.get("success_sources", {}).items()))
    return f"{judge['judged']} runs judged; {agreement}; success from {sources or '-'}"


def _effects(decision: Any) -> str:
    """'+0.087 / +0.120': the predicted change in success and the one measured (on live traffic or replay)."""
    predicted = decision.predicted.get("effect")
    measured = (decision.verdict_detail or {}).get("measured_effect")
    left = f"{predicted:+.3f}" if isinstance(predicted, float | int) else "-"
    return f"{left} / {measured:+.3f}" if isinstance(measured, float | int) else f"{left} / -"


def _calibration_line(cal: dict[str, Any]) -> str:
    parts = [f"calibration: {cal['outcomes']} decided"]
    if "brier" in cal:
        parts.append(
            f"predicted success {cal['predicted_success']:.0%} vs observed {cal['observed_success']:.0%} "
            f"(Brier {cal['brier']:.3f})"
        )
    if "effect_mae" in cal:
        parts.append(
            f"effect predicted {cal['mean_predicted_effect']:+.3f} vs measured {cal['mean_measured_effect']:+.3f} "
            f"on {cal['effects_measured']} live verdicts (MAE {cal['effect_mae']:.3f})"
        )
    return "; ".join(parts)


def status(
    db: str | None = DB,
    agent: str | None = typer.Option(None, help="Only this agent."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    tenant: str = TENANT,
) -> None:
    """Active and canary versions per agent, with statistics at a glance."""
    from rich.table import Table

    data = _plane(db, tenant).status(agent)
    if as_json:
        typer.echo(json.dumps(data, indent=2, default=str))
        return
    if not data:
        typer.echo("no registered agents")
        return
    for name, s in data.items():
        table = Table(title=f"agent {name}", show_header=False)
        table.add_row("harness active / canary", f"{s['harness']['active']} / {s['harness']['canary'] or '-'}")
        table.add_row("policy active / canary", f"{s['policy']['active'] or '-'} / {s['policy']['canary'] or '-'}")
        lo, hi = s["success_ci"]
        table.add_row("runs in window", str(s["runs"]))
        table.add_row("success", f"{s['success_rate']:.0%} (95% CI {lo:.0%}-{hi:.0%})")
        for c, g in s["clusters"].items():
            table.add_row(f"  {c}", f"{g['success_rate']:.0%} of {g['n']}")
        for r in s["rollouts"]:
            table.add_row("rollout", f"{r['id']} {r['state']} {r['candidate_version']} at {r['share']:.0%}")
        table.add_row("decisions", str(s["decisions"]))
        if s.get("judge"):
            table.add_row("judge", _judge_line(s["judge"]))
        _console().print(table)


def decisions(
    db: str | None = DB,
    agent: str | None = typer.Option(None),
    limit: int = typer.Option(30),
    as_json: bool = typer.Option(False, "--json", help="Print JSON records."),
    tenant: str = TENANT,
) -> None:
    """The decision records: lever, why, candidate, state and the measured verdict."""
    from rich.table import Column, Table

    from evolvable.control.lever_choice import calibration

    found = _plane(db, tenant).journal.decisions(agent, None, limit)
    if as_json:
        typer.echo(json.dumps([d.model_dump(mode="json") for d in found], indent=2))
        return
    # (the whole id, folded rather than cut when the terminal is narrow: its first digits are only its time)
    table = Table(
        Column("id", overflow="fold"), "agent", "lever", "state", "verdict", "predicted / measured", "candidate", "why"
    )
    for d in found:
        table.add_row(
            d.id,
            d.agent,
            d.lever.value,
            d.state.value,
            d.verdict.value if d.verdict else "-",
            _effects(d),
            (d.candidate_version or "-")[:19],
            d.rationale[:80],
        )
    _console().print(table)
    typer.echo(_calibration_line(calibration(found)))


def rollout_promote(rollout_id: str, db: str | None = DB, tenant: str = TENANT) -> None:
    """Promote a running or paused rollout's candidate to active."""
    r = _plane(db, tenant).promote(rollout_id, actor="cli")
    typer.echo(f"promoted {r.candidate_version} (rollout {r.id})")


def rollout_rollback(rollout_id: str, db: str | None = DB, tenant: str = TENANT) -> None:
    """Roll back a rollout: reject its candidate, or restore the baseline if it was promoted."""
    r = _plane(db, tenant).rollback(rollout_id, actor="cli")
    typer.echo(f"rolled back {r.candidate_version} (rollout {r.id}); serving {r.baseline_version}")


def approve(decision_id: str, db: str | None = DB, tenant: str = TENANT) -> None:
    """Approve a gated candidate that waits for a human (high-blast-radius levers)."""
    d = _plane(db, tenant).approve(decision_id, actor="cli")
    typer.echo(f"approved {d.id}: {d.state.value} ({d.candidate_version})")


def harness_show(
    agent: str,
    version: str = typer.Argument("active", help="Version id, prefix, active or canary."),
    db: str | None = DB,
    tenant: str = TENANT,
) -> None:
    """Print a harness version as JSON (with its state and lineage)."""
    plane = _plane(db, tenant)
    record = plane.registry.resolve(agent, version)
    lineage = [f"{v.id} ({v.state.value})" for v in plane.registry.lineage(record.id)]
    typer.echo(
        json.dumps(
            {
                "version": record.id,
                "state": record.state.value,
                "note": record.note,
                "lineage": lineage,
                "harness": record.content,
            },
            indent=2,
        )
    )


def harness_diff(
    agent: str,
    a: str,
    b: str = typer.Argument("active"),
    db: str | None = DB,
    as_json: bool = typer.Option(False, "--json"),
    tenant: str = TENANT,
) -> None:
    """Per-component difference between two harness versions (prompt, skills, memory, tools)."""
    from evolvable.control.registry import diff_harnesses, render_diff

    plane = _plane(db, tenant)
    va, vb = plane.registry.resolve(agent, a), plane.registry.resolve(agent, b)
    diff = diff_harnesses(va.harness(), vb.harness())
    typer.echo(json.dumps(diff, indent=2) if as_json else f"{va.id} -> {vb.id}\n" + render_diff(diff))


def harness_register(
    file: Path,
    db: str | None = DB,
    activate: bool = typer.Option(False, help="Make it the active version now."),
    tenant: str = TENANT,
) -> None:
    """Register a harness JSON file as a candidate (or active) version."""
    from evolvable.control.models import VersionState
    from evolvable.errors import ControlError
    from evolvable.protocol.harness import Harness

    try:
        harness = Harness.model_validate_json(file.read_text())
    except (OSError, ValueError) as err:
        raise ControlError(f"cannot read harness {file}: {err}") from None
    state = VersionState.active if activate else VersionState.candidate
    record = _plane(db, tenant).registry.register_harness(harness, state=state, note=f"from {file.name}")
    typer.echo(f"{record.id} ({record.state.value})")


def harness_restore(agent: str, version: str, db: str | None = DB, tenant: str = TENANT) -> None:
    """Make an earlier version active again in one step."""
    plane = _plane(db, tenant)
    record = plane.registry.resolve(agent, version)
    plane.registry.restore(record.id, actor="cli")
    typer.echo(f"{record.id} is active")


def register(app: typer.Typer) -> None:
    app.command()(status)
    app.command()(decisions)
    rollout_app = typer.Typer(help="Promote or roll back a canary rollout by hand.", no_args_is_help=True)
    app.add_typer(rollout_app, name="rollout")
    rollout_app.command("promote")(rollout_promote)
    rollout_app.command("rollback")(rollout_rollback)
    app.command()(approve)
    harness_app = typer.Typer(help="Show and compare harness versions.", no_args_is_help=True)
    app.add_typer(harness_app, name="harness")
    harness_app.command("show")(harness_show)
    harness_app.command("diff")(harness_diff)
    harness_app.command("register")(harness_register)
    harness_app.command("restore")(harness_restore)
