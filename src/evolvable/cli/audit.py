"""`evolvable audit`: the append-only log of reads, exports, purges, policy and key changes, redaction failures."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

import typer

DB_OPTION = typer.Option(None, "--db", help="Database URL (default: EVOLVABLE_DB, else the embedded SQLite).")
_AGO = re.compile(r"^(\d+)([smhd])$")


def _since(value: str) -> datetime:
    from evolvable.protocol.models import utcnow

    match = _AGO.match(value)
    if match:
        unit = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}[match[2]]
        return utcnow() - timedelta(**{unit: int(match[1])})
    return datetime.fromisoformat(value)


def audit(
    tenant: str | None = typer.Option(None, "--tenant"),
    action: str | None = typer.Option(
        None,
        "--action",
        help="read | export | purge | policy_change | key_issued | key_revoked | redaction_failed | retention",
    ),
    since: str | None = typer.Option(None, "--since", help="ISO time, or an age such as 30m, 12h, 7d."),
    limit: int = typer.Option(200, "--limit", min=1),
    as_json: bool = typer.Option(False, "--json", help="One JSON object per line."),
    db: str | None = DB_OPTION,
) -> None:
    """List audit entries, newest first."""
    import orjson
    from rich.table import Table

    from evolvable.cli._console import console, err_console
    from evolvable.governance.audit import AuditAction, AuditLog
    from evolvable.store import Store

    try:
        wanted = AuditAction(action) if action else None
        moment = _since(since) if since else None
    except ValueError:
        known = ", ".join(a.value for a in AuditAction)
        err_console.print(f"[bold red]error:[/] bad --action or --since (actions: {known}; since: ISO time or 7d)")
        raise typer.Exit(2) from None
    entries = AuditLog(Store.open(db).engine).query(tenant_id=tenant, action=wanted, since=moment, limit=limit)
    if as_json:
        for e in entries:
            typer.echo(orjson.dumps(e.model_dump(mode="json")).decode())
        return
    table = Table("at", "actor", "tenant", "action", "target", "details")
    for e in entries:
        details = orjson.dumps(e.details).decode()
        table.add_row(
            e.at.isoformat(timespec="seconds"), e.actor, e.tenant_id or "-", e.action.value, e.target, details[:120]
        )
    console.print(table)


def register(app: typer.Typer) -> None:
    app.command("audit")(audit)
