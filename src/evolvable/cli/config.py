"""`evolvable config check FILE`: validate a configuration and print it resolved (every default filled in)."""

from __future__ import annotations

import json
from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    config_app = typer.Typer(help="Validate and inspect an evolvable.yaml configuration.", no_args_is_help=True)
    app.add_typer(config_app, name="config")

    @config_app.command("check")
    def check(
        file: Path,
        as_json: bool = typer.Option(False, "--json", help="Print JSON instead of YAML."),
        strict: bool = typer.Option(
            False, "--strict", help="Also fail when a workload plugin cannot be imported on this machine."
        ),
    ) -> None:
        """Validate FILE (YAML or TOML); print the resolved configuration, or the bad keys and exit 2.

        Starting harness files must be readable. Workload plugins are imported too: one that is not
        installed here (the agent team's own package) is a warning, or an error with --strict."""
        import yaml

        from evolvable.app import load_config
        from evolvable.app.control import load_workload, starting_harness
        from evolvable.control.workloads import WorkloadError

        cfg = load_config(file)
        for i, agent in enumerate(cfg.agents):  # what would fail at start-up fails here
            starting_harness(agent)
            if agent.workload is None or agent.workload.webhook is not None:
                continue
            try:
                load_workload(agent.workload)
            except WorkloadError as err:
                if strict:
                    raise WorkloadError(f"agents.{i}.workload: {err}") from None
                typer.echo(f"warning: agents.{i}.workload: {err}", err=True)
        resolved = cfg.resolved()
        typer.echo(json.dumps(resolved, indent=2) if as_json else yaml.safe_dump(resolved, sort_keys=False))
