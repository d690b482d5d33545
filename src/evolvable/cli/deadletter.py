"""`evolvable deadletter list|replay|discard`: the proxy's quarantine of records it could not store.

Works on a spool directory directly (the proxy's `/v1/proxy/deadletter` does the same over HTTP).
`replay` puts records back into the spool, so it needs the spool's lock: run it while the proxy is
stopped (the next start stores them), or replay through the running proxy's endpoint."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import typer

deadletter_app = typer.Typer(
    help="Records the proxy's writer quarantined: list, replay, discard.", no_args_is_help=True
)

SPOOL_OPTION = typer.Option(None, "--spool-dir", help="The proxy's spool directory (default: under EVOLVABLE_HOME).")


def _spool_dir(spool_dir: Path | None) -> Path:
    from evolvable.settings import get_settings

    return spool_dir or get_settings().home / "spool"


@deadletter_app.command("list")
def list_entries(
    spool_dir: Path | None = SPOOL_OPTION,
    tenant: str | None = typer.Option(None, "--tenant", help="Only this tenant's records."),
) -> None:
    """Show quarantined records (never their content: it is unredacted)."""
    from rich.table import Column, Table

    from evolvable.cli._console import console
    from evolvable.proxy.deadletter import DeadLetter

    # Ids are copied into `replay`/`discard`: never wrapped.
    table = Table(Column("id", no_wrap=True), "tenant", "kind", "trajectory", "quarantined", "bytes", "error")
    for e in DeadLetter(_spool_dir(spool_dir)).entries(tenant):
        when = datetime.fromtimestamp(e.quarantined_at, UTC).strftime("%Y-%m-%d %H:%M:%S")
        table.add_row(e.id, e.tenant_id or "", e.kind or "", e.trajectory_id or "", when, str(e.size), e.error[:80])
    console.print(table)


@deadletter_app.command("replay")
def replay(
    entry_ids: list[str] = typer.Argument(None, help="Entries to replay (default: all)."),
    spool_dir: Path | None = SPOOL_OPTION,
) -> None:
    """Put quarantined records back into the spool (after the fix); the proxy stores them at its next start."""
    from evolvable.cli._console import console, err_console
    from evolvable.proxy.deadletter import DeadLetter
    from evolvable.proxy.spool import Spool, SpoolError

    directory = _spool_dir(spool_dir)
    queue = DeadLetter(directory)
    wanted = entry_ids or [e.id for e in queue.entries()]
    payloads = {entry_id: queue.take(entry_id) for entry_id in wanted}
    missing = [entry_id for entry_id, payload in payloads.items() if payload is None]
    if missing:
        err_console.print(f"[bold red]error:[/] no such dead letter: {', '.join(missing)}")
        raise typer.Exit(2)
    spool = Spool(directory, fsync="batch")
    try:
        spool.open()
    except SpoolError as err:
        err_console.print(f"[bold red]error:[/] {err}; replay through the proxy's /v1/proxy/deadletter/replay")
        raise typer.Exit(2) from None
    try:
        for payload in payloads.values():
            while not spool.append_nowait(payload):  # type: ignore[arg-type]
                spool.wait_written(spool.enqueued, 10)
        if spool.wait_written(spool.enqueued, 60) is None or spool.dropped:
            err_console.print("[bold red]error:[/] the spool could not be written; nothing was removed")
            raise typer.Exit(2)
    finally:
        spool.close()
    for entry_id in payloads:
        queue.remove(entry_id)
    console.print(f"replayed {len(payloads)} record(s) into {directory}")


@deadletter_app.command("discard")
def discard(
    entry_ids: list[str] = typer.Argument(..., help="Entries to delete."), spool_dir: Path | None = SPOOL_OPTION
) -> None:
    """Delete quarantined records for good."""
    from evolvable.cli._console import console, err_console
    from evolvable.proxy.deadletter import DeadLetter

    queue = DeadLetter(_spool_dir(spool_dir))
    missing = [entry_id for entry_id in entry_ids if not queue.remove(entry_id)]
    if missing:
        err_console.print(f"[bold red]error:[/] no such dead letter: {', '.join(missing)}")
        raise typer.Exit(2)
    console.print(f"discarded {len(entry_ids)} record(s)")


def register(app: typer.Typer) -> None:
    app.add_typer(deadletter_app, name="deadletter")
