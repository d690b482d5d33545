"""`evolvable demo`: watch an agent improve through Evolvable on the embedded model."""

from __future__ import annotations

import time
from pathlib import Path

import typer


def demo(
    quick: bool = typer.Option(False, "--quick", help="A short run (about 4 minutes on 2 idle cores)."),
    levers: str | None = typer.Option(
        None, "--levers", help="Comma-separated levers the control plane may use: memory,skill,prompt,tool,weights."
    ),
    report: Path | None = typer.Option(None, "--report", help="Report folder (default: reports/demo-<time>)."),
    model: str = typer.Option("smollm2-135m", "--model", help="Embedded model to serve."),
) -> None:
    """Run the whole loop: policy server, proxy, live support-desk traffic, control plane; then report."""
    from evolvable.cli._console import console
    from evolvable.control.models import Lever
    from evolvable.demo import DemoConfig, run_demo
    from evolvable.errors import ControlError

    chosen = None
    if levers is not None:
        names = [n.strip() for n in levers.split(",") if n.strip()]
        valid = {lv.value for lv in Lever if lv != Lever.rollback}
        unknown = [n for n in names if n not in valid]
        if unknown or not names:
            raise ControlError(f"--levers: unknown lever(s) {unknown or names}; choose from {', '.join(sorted(valid))}")
        chosen = frozenset(Lever(n) for n in names)
    folder = report or Path("reports") / time.strftime("demo-%Y%m%d-%H%M%S")
    run_demo(DemoConfig.build(folder, quick=quick, levers=chosen, model=model), console)


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)
