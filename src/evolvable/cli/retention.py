"""`evolvable retention run`: erase every tenant's runs older than its retention period."""

from __future__ import annotations

from datetime import datetime

import typer

retention_app = typer.Typer(
    help="Retention: per-tenant periods, enforced on demand or by the proxy.", no_args_is_help=True
)

DB_OPTION = typer.Option(None, "--db", help="Database URL (default: EVOLVABLE_DB, else the embedded SQLite).")


@retention_app.command("run")
def run(
    now: str | None = typer.Option(None, "--now", help="Pretend it is this ISO time (default: now)."),
    db: str | None = DB_OPTION,
) -> None:
    """Apply every tenant's retention period once (the proxy also runs this in the background)."""
    from rich.table import Table

    from evolvable.cli._console import console, err_console
    from evolvable.control.erasure import control_erasers
    from evolvable.errors import EvolvableError
    from evolvable.governance.purge import Purger
    from evolvable.governance.retention import RetentionJob
    from evolvable.store import Store

    moment = None
    if now is not None:
        try:
            moment = datetime.fromisoformat(now)
        except ValueError:
            err_console.print(f"[bold red]error:[/] --now must be an ISO date or time, got {now!r}")
            raise typer.Exit(2) from None
    try:
        store = Store.open(db)
        purger = Purger(store, erasers=control_erasers(store.engine))
        results = RetentionJob(store, purger=purger).run_once(moment, actor="cli")
    except EvolvableError as err:
        err_console.print(f"[bold red]error:[/] {err}", highlight=False)
        raise typer.Exit(2) from None
    table = Table("tenant", "retention", "cut-off", "trajectories erased", "dataset items erased")
    for r in results:
        table.add_row(
            r.tenant_id,
            f"{r.retention_days} d",
            r.cutoff.isoformat(timespec="seconds"),
            str(r.trajectories),
            str(r.dataset_items),
        )
    console.print(table if results else "no tenant has a retention period")


def register(app: typer.Typer) -> None:
    app.add_typer(retention_app, name="retention")
