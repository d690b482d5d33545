"""`evolvable trajectories list|show|export`: stored runs for operators, with the HTTP API's filters."""

from __future__ import annotations

import json
import sys
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import typer

from evolvable.cli._console import console, err_console

if TYPE_CHECKING:
    from evolvable.store import Store

trajectories_app = typer.Typer(help="Stored trajectories: list, show, export (JSONL, OTLP).", no_args_is_help=True)

DB = typer.Option(None, "--db", help="Database URL (default: EVOLVABLE_DB, else the embedded SQLite).")
TENANT = typer.Option(None, "--tenant", help="Only this tenant's runs (default: every tenant).")
AGENT = typer.Option(None, "--agent")
STATUS = typer.Option(None, "--status", help="running | completed | failed | abandoned")
HARNESS = typer.Option(None, "--harness-version")
POLICY = typer.Option(None, "--policy-version")
TASK = typer.Option(None, "--task-id")
END_USER = typer.Option(None, "--end-user")
AFTER = typer.Option(None, "--started-after", help="ISO time, inclusive.")
BEFORE = typer.Option(None, "--started-before", help="ISO time, exclusive.")


def _fail(message: str) -> NoReturn:
    from rich.markup import escape

    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False)
    raise typer.Exit(2)


def _time(value: str | None, option: str) -> datetime | None:
    if value is None:
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        _fail(f"{option} takes an ISO time such as 2026-01-31T12:00:00Z, not {value!r}")
    return None


def _filter(**given: Any) -> Any:
    from evolvable.protocol.models import TrajectoryStatus
    from evolvable.store import TrajectoryFilter

    status = given.pop("status")
    if status is not None and status not in TrajectoryStatus.__members__:
        _fail(f"--status must be one of {', '.join(TrajectoryStatus.__members__)}, not {status!r}")
    return TrajectoryFilter(
        status=status,
        started_after=_time(given.pop("started_after"), "--started-after"),
        started_before=_time(given.pop("started_before"), "--started-before"),
        **given,
    )


def _store(db: str | None) -> Store:
    from evolvable.errors import EvolvableError
    from evolvable.store import Store

    try:
        return Store.open(db)
    except EvolvableError as err:
        _fail(str(err))


@trajectories_app.command("list")
def list_(
    tenant: str | None = TENANT,
    agent: str | None = AGENT,
    status: str | None = STATUS,
    harness_version: str | None = HARNESS,
    policy_version: str | None = POLICY,
    task_id: str | None = TASK,
    end_user: str | None = END_USER,
    started_after: str | None = AFTER,
    started_before: str | None = BEFORE,
    limit: int = typer.Option(50, "--limit", min=1, max=500),
    cursor: str | None = typer.Option(None, "--cursor", help="The next_cursor of a previous page."),
    as_json: bool = typer.Option(False, "--json", help="The HTTP API's page: {data, next_cursor}."),
    db: str | None = DB,
) -> None:
    """One page of stored runs, newest first."""
    from evolvable.store import InvalidCursor

    f = _filter(
        tenant_id=tenant,
        agent=agent,
        status=status,
        harness_version=harness_version,
        policy_version=policy_version,
        task_id=task_id,
        end_user=end_user,
        started_after=started_after,
        started_before=started_before,
    )
    try:
        page, next_cursor = _store(db).list_trajectories(f, limit, cursor)
    except InvalidCursor:
        _fail("invalid --cursor")
    if as_json:
        sys.stdout.write(json.dumps({"data": [h.model_dump(mode="json") for h in page], "next_cursor": next_cursor}))
        sys.stdout.write("\n")
        return
    from rich.table import Column, Table

    table = Table("tenant", "agent", "status", "started", "harness", "policy", "task")
    table.columns.insert(0, Column("id", no_wrap=True))  # an id is copied from here: never wrapped
    for h in page:
        table.add_row(
            h.id,
            h.tenant_id,
            h.agent,
            h.status.value,
            h.started_at.strftime("%Y-%m-%d %H:%M:%S"),
            h.harness_version or "",
            h.policy_version or "",
            h.task_id or "",
        )
    console.print(table)
    if next_cursor:
        console.print(f"more: --cursor {next_cursor}", highlight=False, markup=False)


@trajectories_app.command("show")
def show(
    trajectory_id: str = typer.Argument(...),
    tenant: str | None = typer.Option(None, "--tenant", help="Refuse a run of another tenant."),
    as_json: bool = typer.Option(False, "--json", help="The whole trajectory as ATDP JSON."),
    db: str | None = DB,
) -> None:
    """One run: its header, steps and signals."""
    from evolvable.errors import NotFound

    try:
        t = _store(db).get_trajectory(trajectory_id, tenant)
    except NotFound:
        _fail(f"trajectory {trajectory_id} not found")
    if as_json:
        sys.stdout.write(t.model_dump_json() + "\n")
        return
    _print_trajectory(t)


def _print_trajectory(t: Any) -> None:
    from rich.table import Table

    ended = t.ended_at.strftime("%Y-%m-%d %H:%M:%S") if t.ended_at else "-"
    console.print(f"[bold]{t.id}[/]  tenant {t.tenant_id}  agent {t.agent}  {t.status.value}", highlight=False)
    console.print(f"started {t.started_at:%Y-%m-%d %H:%M:%S}  ended {ended}", highlight=False)
    console.print(f"harness {t.harness_version or '-'}  policy {t.policy_version or '-'}", highlight=False)
    steps = Table("#", "kind", "agent", "status", "summary")
    for n, step in enumerate(t.steps, start=1):
        steps.add_row(str(n), step.kind, step.agent or "", str(getattr(step, "status", "") or ""), _summary(step))
    console.print(steps)
    if t.signals:
        signals = Table("signal", "value", "step", "source", "label")
        for s in t.signals:
            signals.add_row(s.kind.value, f"{s.value:g}", s.step_id or "(run)", s.source, s.label or "")
        console.print(signals)


def _summary(step: Any, width: int = 80) -> str:
    if step.kind == "llm_call":
        reply = step.response
        said = reply.text() if reply else ""
        calls = ", ".join(c.function.name for c in (reply.tool_calls or [])) if reply else ""
        text = f"{step.model or ''}: {said or calls}"
    elif step.kind == "tool_call":
        text = f"{step.tool_name}({json.dumps(step.arguments, default=str)}) -> {json.dumps(step.result, default=str)}"
    elif step.kind == "handoff":
        text = f"{step.from_agent} -> {step.to_agent}"
    else:
        text = json.dumps(step.model_dump(mode="json", exclude={"id", "kind", "started_at", "ended_at"}), default=str)
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


@trajectories_app.command("export")
def export(
    output: Path | None = typer.Option(None, "-o", "--output", help="ATDP JSONL file ('-' for stdout)."),
    otlp: str | None = typer.Option(None, "--otlp", help="Send as GenAI spans to this OTLP/HTTP endpoint."),
    otlp_header: list[str] = typer.Option([], "--otlp-header", help="KEY=VALUE header for the OTLP endpoint."),
    service_name: str = typer.Option("evolvable", "--service-name", help="service.name of the exported spans."),
    tenant: str | None = TENANT,
    agent: str | None = AGENT,
    status: str | None = STATUS,
    harness_version: str | None = HARNESS,
    policy_version: str | None = POLICY,
    task_id: str | None = TASK,
    end_user: str | None = END_USER,
    started_after: str | None = AFTER,
    started_before: str | None = BEFORE,
    db: str | None = DB,
) -> None:
    """Export the matching runs as ATDP JSONL (-o) and/or OTLP GenAI spans (--otlp)."""
    if output is None and otlp is None:
        _fail("say where to: -o FILE (ATDP JSONL) and/or --otlp URL")
    headers = {}
    for pair in otlp_header:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            _fail(f"--otlp-header takes KEY=VALUE, got {pair!r}")
        headers[key.strip()] = value.strip()
    f = _filter(
        tenant_id=tenant,
        agent=agent,
        status=status,
        harness_version=harness_version,
        policy_version=policy_version,
        task_id=task_id,
        end_user=end_user,
        started_after=started_after,
        started_before=started_before,
    )
    store = _store(db)
    if output is not None:
        count = _write_jsonl(store.iter_trajectories(f), output)
        err_console.print(f"{count} trajectories -> {output}", highlight=False)
    if otlp is not None:
        _send_otlp(store.iter_trajectories(f), otlp, headers, service_name)


def _write_jsonl(trajectories: Any, output: Path) -> int:
    count = 0
    if str(output) == "-":
        for t in trajectories:
            sys.stdout.write(t.model_dump_json() + "\n")
            count += 1
        return count
    output.parent.mkdir(parents=True, exist_ok=True)
    with output.open("w") as fh:
        for t in trajectories:
            fh.write(t.model_dump_json() + "\n")
            count += 1
    return count


def _send_otlp(trajectories: Any, url: str, headers: dict[str, str], service_name: str) -> None:
    from evolvable.proxy.otlp_export import ExportFailed, export_trajectories, otlp_exporter, traces_endpoint

    exporter = otlp_exporter(url, headers)
    try:
        sent, spans = export_trajectories(trajectories, exporter, service_name=service_name)
    except ExportFailed as err:
        _fail(str(err))
    finally:
        exporter.shutdown()  # type: ignore[no-untyped-call]  # opentelemetry's OTLPSpanExporter.shutdown is unannotated
    err_console.print(f"{sent} trajectories ({spans} spans) -> {traces_endpoint(url)}", highlight=False)


def register(app: typer.Typer) -> None:
    app.add_typer(trajectories_app, name="trajectories")
