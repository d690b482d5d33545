"""`evolvable purge`: erase a tenant's, an end user's or a session's data (store, datasets, spool)."""

from __future__ import annotations

from pathlib import Path

import typer

DB_OPTION = typer.Option(None, "--db", help="Database URL (default: EVOLVABLE_DB, else the embedded SQLite).")


def purge(
    tenant: str | None = typer.Option(None, "--tenant", help="Everything of this tenant (or scope --user to it)."),
    user: str | None = typer.Option(None, "--user", help="Every run that served this end user."),
    session: str | None = typer.Option(None, "--session", help="One session (= trajectory id)."),
    spool: Path | None = typer.Option(
        None, "--spool", help="Spool directory of a stopped proxy (default: spool/ under EVOLVABLE_HOME, if present)."
    ),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation."),
    db: str | None = DB_OPTION,
) -> None:
    """Erase data for good: trajectories with steps and signals, dataset copies, and not-yet-stored spool records.

    A running proxy holds its spool: purge through its API (POST /v1/admin/purge) instead."""
    from evolvable.cli._console import console, err_console
    from evolvable.control.erasure import control_erasers
    from evolvable.errors import EvolvableError
    from evolvable.governance.purge import Purger, PurgeRequest
    from evolvable.proxy.spool_purger import offline_spool_purger
    from evolvable.settings import get_settings
    from evolvable.store import Store

    if not (tenant or user or session):
        err_console.print("[bold red]error:[/] say what to purge: --tenant, --user and/or --session")
        raise typer.Exit(2)
    request = PurgeRequest(tenant_id=tenant, end_user=user, trajectory_id=session)
    if not yes and not typer.confirm(f"Erase all data of {request.describe()}? This cannot be undone."):
        raise typer.Exit(1)
    spool_dir = spool if spool is not None else get_settings().home / "spool"
    try:
        store = Store.open(db)
        purger = Purger(store, spool_purger=offline_spool_purger(spool_dir), erasers=control_erasers(store.engine))
        report = purger.purge(request, actor="cli")
    except EvolvableError as err:
        err_console.print(f"[bold red]error:[/] {err}", highlight=False)
        raise typer.Exit(2) from None
    from rich.table import Table

    table = Table("erased", "count")
    table.add_row("trajectories", str(report.trajectories))
    table.add_row("dataset items", str(report.dataset_items))
    table.add_row("datasets invalidated", str(report.datasets_invalidated))
    table.add_row("spool records", "no spool found" if report.spool_records is None else str(report.spool_records))
    for kind, found in report.derived.items():
        if isinstance(found, list):
            for item in found:
                table.add_row(f"adapter {item['policy_version']} ({item['agent']})", item["action"])
        else:
            table.add_row(kind.replace("_", " "), str(found))
    console.print(table)


def register(app: typer.Typer) -> None:
    app.command("purge")(purge)
