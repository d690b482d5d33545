"""`evolvable dataset create|list|export`: curated, immutable, versioned snapshots and their training views."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

dataset_app = typer.Typer(help="Curated dataset snapshots and exports.", no_args_is_help=True)

DB_OPTION = typer.Option(None, "--db", help="Database URL (default: EVOLVABLE_DB, else the embedded SQLite).")
_LIST_KEYS = {"ids"}


def _fail(message: str) -> None:
    from evolvable.cli._console import err_console

    err_console.print(f"[bold red]error:[/] {message}", highlight=False)
    raise typer.Exit(2)


def _filters(pairs: list[str]) -> dict[str, Any]:
    """`key=value` pairs; a repeated key (or a comma list for ids) means any of several values."""
    spec: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            _fail(f"--filter takes KEY=VALUE, got {pair!r}")
        if key in _LIST_KEYS:
            spec.setdefault(key, []).extend(v for v in value.split(",") if v)
        elif key in spec:
            previous = spec[key]
            spec[key] = [*(previous if isinstance(previous, list) else [previous]), value]
        else:
            spec[key] = value
    return spec


@dataset_app.command("create")
def create(
    name: str = typer.Argument(..., help="Dataset name; each create makes the next version."),
    filter_: list[str] = typer.Option(
        [],
        "--filter",
        help="KEY=VALUE (repeatable): tenant_id, agent, status, harness_version, policy_version, "
        "end_user, task_id, started_after, started_before, ids, has_outcome.",
    ),
    dedup: str = typer.Option("near", "--dedup", help="exact | near | none"),
    quality: list[str] = typer.Option(
        [], "--quality", help="default | none | rl | KEY=VALUE, e.g. max_steps=50, require_token_ids=true (repeatable)."
    ),
    near_threshold: float = typer.Option(0.8, "--near-threshold", min=0.1, max=1.0, help="MinHash Jaccard threshold."),
    db: str | None = DB_OPTION,
) -> None:
    """Snapshot the curated selection of stored trajectories as a new immutable version."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from evolvable.errors import EvolvableError
    from evolvable.governance.curation import QualityConfig
    from evolvable.governance.datasets import DatasetCatalog, filter_from_dict
    from evolvable.store import Store

    if dedup not in ("exact", "near", "none"):
        _fail(f"--dedup must be exact, near or none, not {dedup!r}")
    try:
        spec = _filters(filter_)
        config = QualityConfig.parse(quality)
        store = Store.open(db)
        total = store.count(filter_from_dict(spec))
        with Progress(
            TextColumn("curating"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), transient=True
        ) as progress:
            task = progress.add_task("curate", total=total)
            info = DatasetCatalog(store).create(
                name,
                filter=spec,
                quality=config,
                dedup=dedup,  # type: ignore[arg-type]
                near_threshold=near_threshold,
                progress=lambda n: progress.update(task, completed=n),
            )
    except EvolvableError as err:
        _fail(str(err))
    _show([info], detail=True)


@dataset_app.command("list")
def list_(
    tenant: str | None = typer.Option(None, "--tenant", help="Only this tenant's datasets ('*' for cross-tenant)."),
    db: str | None = DB_OPTION,
) -> None:
    """List dataset versions."""
    from evolvable.governance.datasets import DatasetCatalog
    from evolvable.store import Store

    _show(DatasetCatalog(Store.open(db)).list(tenant))


@dataset_app.command("export")
def export(
    ref: str = typer.Argument(..., help="NAME (newest version) or NAME@VERSION."),
    fmt: str = typer.Option(..., "--format", "-f", help="atdp | sft | preference | rl-samples | parquet"),
    output: Path = typer.Option(..., "-o", "--output", help="File to write; a .manifest.json is written beside it."),
    tenant: str | None = typer.Option(None, "--tenant", help="Whose dataset, when several tenants use the name."),
    db: str | None = DB_OPTION,
) -> None:
    """Export a snapshot; every record and the manifest name each trajectory's harness and policy version."""
    from evolvable.cli._console import console
    from evolvable.errors import EvolvableError
    from evolvable.governance.datasets import DatasetCatalog
    from evolvable.store import Store

    try:
        result = DatasetCatalog(Store.open(db)).export(ref, fmt, output, tenant_id=tenant)
    except EvolvableError as err:
        _fail(str(err))
    skipped = f" ({result.skipped} trajectories skipped: no usable data for this format)" if result.skipped else ""
    console.print(f"wrote {result.records} records to {result.path}{skipped}")
    console.print(f"manifest {result.manifest_path}")


def _show(infos: list[Any], *, detail: bool = False) -> None:
    from rich.table import Table

    from evolvable.cli._console import console

    table = Table("dataset", "tenant", "kept", "scanned", "dropped", "dups", "content hash", "created", "state")
    for i in infos:
        c = i.counts
        dups = c.get("duplicate_exact", 0) + c.get("duplicate_near", 0)
        state = "invalidated" if i.invalidated_at else ("exported" if i.exported_at else "new")
        table.add_row(
            i.ref,
            i.tenant_id,
            str(c.get("kept", 0)),
            str(c.get("scanned", 0)),
            str(c.get("dropped_quality", 0)),
            str(dups),
            i.content_hash[:19],
            i.created_at.strftime("%Y-%m-%d %H:%M"),
            state,
        )
    console.print(table)
    if detail:
        for info in infos:
            reasons = ", ".join(f"{k}={v}" for k, v in sorted(info.counts.get("quality_reasons", {}).items())) or "none"
            console.print(f"dropped by quality: {reasons}")
            versions = ", ".join(f"{k}={v}" for k, v in info.counts.get("harness_versions", {}).items()) or "none"
            console.print(f"harness versions: {versions}")


def register(app: typer.Typer) -> None:
    app.add_typer(dataset_app, name="dataset")
