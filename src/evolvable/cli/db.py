"""`evolvable db ...`: migrate a database, check it against the code, write new migrations."""

from __future__ import annotations

import typer

db_app = typer.Typer(help="Store schema: upgrade, check, and new migrations.", no_args_is_help=True)

DB_OPTION = typer.Option(None, "--db", help="Database URL (default: EVOLVABLE_DB, else the embedded SQLite).")


@db_app.command("upgrade")
def upgrade(db: str | None = DB_OPTION) -> None:
    """Migrate the database to the newest schema (creating it if needed)."""
    from rich.console import Console

    from evolvable.store import Store

    store = Store.open(db)
    revision = store.schema_revision()
    Console().print(f"{store!r} is at revision [bold]{revision}[/]")
    store.close()


@db_app.command("check")
def check(db: str | None = DB_OPTION) -> None:
    """Compare the database with the tables the code declares; exit 1 on any difference."""
    from rich.console import Console

    from evolvable.store import Store
    from evolvable.store.migrate import schema_diff

    store = Store.open(db, migrate_schema=False)
    diffs = schema_diff(store.engine)
    store.close()
    console = Console()
    for diff in diffs:
        console.print(f"[yellow]differs:[/] {diff}", highlight=False)
    if diffs:
        raise typer.Exit(1)
    console.print("schema matches the code")


@db_app.command("revision")
def revision(message: str = typer.Option(..., "-m", "--message", help="What the migration does.")) -> None:
    """Autogenerate a migration for tables and columns the code declares beyond the newest revision."""
    from rich.console import Console

    from evolvable.store.migrate import autogenerate_revision

    path = autogenerate_revision(message)
    Console().print(f"wrote {path}" if path else "nothing to do")


def register(app: typer.Typer) -> None:
    app.add_typer(db_app, name="db")
