"""`evolvable control tick --config FILE`: one control cycle from a terminal (operators, cron, tests).

It builds the control planes from the same configuration `serve` uses, acts only if it wins the
leader lock (a running `serve` that ticks on its own holds it), and releases the lock when done.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    control_app = typer.Typer(help="Run the evolution control plane by hand.", no_args_is_help=True)
    app.add_typer(control_app, name="control")

    @control_app.command("tick")
    def tick(
        config: Path = typer.Option(..., "--config", help="The evolvable.yaml that `serve` runs."),
        db: str | None = typer.Option(None, "--db", help="Database URL (overrides the file's store.url)."),
        tenant: str | None = typer.Option(None, "--tenant", help="Only this tenant's agents."),
        agent: str | None = typer.Option(None, "--agent", help="Only this agent."),
        as_json: bool = typer.Option(False, "--json", help="Print the tick report as JSON."),
    ) -> None:
        """Statistics -> decision -> candidate -> gates -> canary -> verdicts, once, for every configured agent."""
        from evolvable.app import load_config
        from evolvable.app.stack import build_control_only

        cfg = load_config(config)
        if db is not None:
            cfg.store.url = db
        with build_control_only(cfg) as stack:
            assert stack.planes is not None
            try:
                report = stack.planes.tick(tenant, agent)
            finally:
                stack.planes.leader.release()
        if as_json:
            typer.echo(json.dumps({"leader": report.leader, "actions": report.actions, "decisions": report.decisions}))
        else:
            typer.echo(str(report))
