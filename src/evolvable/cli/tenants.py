"""`evolvable tenants ...`: tenants, their capture/retention policy, and API keys (shown once)."""

from __future__ import annotations

from typing import Any

import typer

tenants_app = typer.Typer(help="Tenants, capture policy, retention, and API keys.", no_args_is_help=True)

DB_OPTION = typer.Option(None, "--db", help="Database URL (default: EVOLVABLE_DB, else the embedded SQLite).")
CAPTURE_HELP = "full (redacted content) | metadata (structure, timings, signals; no content) | off (nothing)."


def _directory(db: str | None) -> Any:
    from evolvable.governance.tenants import TenantDirectory
    from evolvable.store import Store

    return TenantDirectory.from_store(Store.open(db))


def _fail(message: str) -> None:
    from evolvable.cli._console import err_console

    err_console.print(f"[bold red]error:[/] {message}", highlight=False)
    raise typer.Exit(2)


def _agent_modes(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        agent, sep, mode = pair.partition("=")
        if not sep or not agent:
            _fail(f"--agent-capture takes AGENT=MODE, got {pair!r}")
        out[agent] = mode
    return out


def _retention(value: str | None) -> int | None:
    if value is None or value.lower() in {"none", "forever"}:
        return None
    if not value.isdigit() or int(value) < 1:
        _fail(f"--retention-days takes a positive number of days or 'none', got {value!r}")
    return int(value)


def _show_tenants(tenants: list[Any]) -> None:
    from rich.table import Table

    from evolvable.cli._console import console

    table = Table("id", "name", "capture", "agent overrides", "retention", "redact upstream", "created")
    for t in tenants:
        overrides = ", ".join(f"{a}={m.value}" for a, m in sorted(t.agent_capture.items())) or "-"
        retention = f"{t.retention_days} d" if t.retention_days else "keep"
        created = t.created_at.strftime("%Y-%m-%d %H:%M") if t.created_at else "-"
        table.add_row(
            t.id, t.name, t.capture.value, overrides, retention, "yes" if t.redact_upstream else "no", created
        )
    console.print(table)


def _show_key(issued: Any) -> None:
    from evolvable.cli._console import console

    console.print(f"key id     [bold]{issued.key_id}[/] (tenant {issued.tenant_id}, {issued.role.value})")
    console.print(f"api key    [bold green]{issued.key}[/]", highlight=False, soft_wrap=True)
    console.print("[yellow]Store it now: it is shown once and only its hash is kept.[/]")


@tenants_app.command("init")
def init(
    tenant: str = typer.Option(
        "default", "--tenant", help="Tenant to create (if missing) for the first (operator) key."
    ),
    db: str | None = DB_OPTION,
) -> None:
    """First-run setup: create the tenant and an operator key in it (it can create the other tenants)."""
    from evolvable.errors import EvolvableError

    try:
        _show_key(_directory(db).init_admin(tenant))
    except EvolvableError as err:
        _fail(str(err))


@tenants_app.command("create")
def create(
    tenant_id: str = typer.Argument(..., help="Tenant id: letters, digits, '_', '.', '-'."),
    name: str | None = typer.Option(None, "--name"),
    capture: str = typer.Option("full", "--capture", help=CAPTURE_HELP),
    agent_capture: list[str] = typer.Option([], "--agent-capture", help="AGENT=MODE override (repeatable)."),
    retention_days: str | None = typer.Option(None, "--retention-days", help="Days to keep runs; 'none' keeps them."),
    redact_upstream: bool = typer.Option(False, "--redact-upstream/--no-redact-upstream"),
    db: str | None = DB_OPTION,
) -> None:
    """Create a tenant with its capture and retention policy."""
    from evolvable.errors import EvolvableError

    try:
        tenant = _directory(db).create_tenant(
            tenant_id,
            name=name,
            capture=capture,
            agent_capture=_agent_modes(agent_capture),
            retention_days=_retention(retention_days),
            redact_upstream=redact_upstream,
        )
    except EvolvableError as err:
        _fail(str(err))
    _show_tenants([tenant])


@tenants_app.command("list")
def list_(db: str | None = DB_OPTION) -> None:
    """List tenants and their policies."""
    _show_tenants(_directory(db).list_tenants())


@tenants_app.command("update")
def update(
    tenant_id: str = typer.Argument(...),
    name: str | None = typer.Option(None, "--name"),
    capture: str | None = typer.Option(None, "--capture", help=CAPTURE_HELP),
    agent_capture: list[str] = typer.Option([], "--agent-capture", help="AGENT=MODE override (repeatable)."),
    clear_agent_capture: bool = typer.Option(False, "--clear-agent-capture", help="Drop every per-agent override."),
    retention_days: str | None = typer.Option(None, "--retention-days", help="Days to keep runs; 'none' keeps them."),
    redact_upstream: bool | None = typer.Option(None, "--redact-upstream/--no-redact-upstream"),
    db: str | None = DB_OPTION,
) -> None:
    """Change a tenant's policy (audited as policy_change)."""
    from evolvable.errors import EvolvableError

    directory = _directory(db)
    changes: dict[str, Any] = {}
    if name is not None:
        changes["name"] = name
    if capture is not None:
        changes["capture"] = capture
    if retention_days is not None:
        changes["retention_days"] = _retention(retention_days)
    if redact_upstream is not None:
        changes["redact_upstream"] = redact_upstream
    try:
        if clear_agent_capture or agent_capture:
            current = {} if clear_agent_capture else dict(directory.get_tenant(tenant_id).agent_capture)
            changes["agent_capture"] = {**current, **_agent_modes(agent_capture)}
        if not changes:
            _fail("nothing to change: pass --capture, --agent-capture, --retention-days, --redact-upstream or --name")
        tenant = directory.update_tenant(tenant_id, **changes)
    except EvolvableError as err:
        _fail(str(err))
    _show_tenants([tenant])


@tenants_app.command("issue-key")
def issue_key(
    tenant_id: str = typer.Argument(...),
    label: str = typer.Option("", "--label"),
    admin: bool = typer.Option(
        False, "--admin", help="An admin key manages its own tenant: policy, keys, purges, audit log."
    ),
    operator: bool = typer.Option(
        False, "--operator", help="An operator key administers every tenant (creates tenants, issues any key)."
    ),
    db: str | None = DB_OPTION,
) -> None:
    """Issue an API key for a tenant; the key is printed once."""
    from evolvable.errors import EvolvableError

    try:
        role = "operator" if operator else None
        _show_key(_directory(db).issue_key(tenant_id, label=label, is_admin=admin, role=role))
    except EvolvableError as err:
        _fail(str(err))


@tenants_app.command("revoke-key")
def revoke_key(key_id: str = typer.Argument(...), db: str | None = DB_OPTION) -> None:
    """Revoke an API key (other proxy processes stop accepting it within their cache TTL, 30 s)."""
    from evolvable.cli._console import console
    from evolvable.errors import EvolvableError

    try:
        info = _directory(db).revoke_key(key_id)
    except EvolvableError as err:
        _fail(str(err))
    console.print(f"revoked {info.id} (tenant {info.tenant_id})")


@tenants_app.command("keys")
def keys(tenant_id: str | None = typer.Argument(None), db: str | None = DB_OPTION) -> None:
    """List API keys (ids and labels; keys themselves are never stored)."""
    from rich.table import Table

    from evolvable.cli._console import console

    table = Table("key id", "tenant", "label", "role", "created", "revoked")
    for k in _directory(db).list_keys(tenant_id):
        revoked = k.revoked_at.strftime("%Y-%m-%d %H:%M") if k.revoked_at else "-"
        table.add_row(k.id, k.tenant_id, k.label, k.role.value, k.created_at.strftime("%Y-%m-%d %H:%M"), revoked)
    console.print(table)


def register(app: typer.Typer) -> None:
    app.add_typer(tenants_app, name="tenants")
