"""The `evolvable` command. Each module in this package registers its own commands.

A module defines `register(app: typer.Typer) -> None`; this file finds them, so
adding a command group never touches this file. Heavy imports (torch,
transformers) stay inside the commands so `evolvable --help` is instant.
"""

from __future__ import annotations

import importlib
import os
import pkgutil

# Idle OpenMP threads sleep instead of spinning; several torch processes (policy server, trainer,
# demo) share the cores, and spinning made generation ~30x slower. Set before torch is imported.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import typer

import evolvable

app = typer.Typer(
    name="evolvable",
    help="Evolvable: record agent trajectories, govern them, and evolve agents from their own traffic.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback(invoke_without_command=True)
def _root(version: bool = typer.Option(False, "--version", help="Print the version and exit.")) -> None:
    if version:
        typer.echo(evolvable.__version__)
        raise typer.Exit()


def _register_all() -> None:
    import evolvable.cli as pkg

    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
        if info.name.startswith("_") or info.name == "main":
            continue
        module = importlib.import_module(f"evolvable.cli.{info.name}")
        register = getattr(module, "register", None)
        if register is not None:
            register(app)


_register_all()


def main() -> None:
    """Entry point: known errors become a message and exit code 2, never a traceback."""
    from evolvable.errors import EvolvableError

    try:
        app()
    except EvolvableError as err:
        from rich.markup import escape

        from evolvable.cli._console import err_console

        err_console.print(f"[bold red]error:[/] {escape(str(err))}", highlight=False)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
