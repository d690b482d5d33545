"""Consoles shared by the CLI. Errors never wrap, so each one stays on one greppable line."""

from rich.console import Console

console = Console()
err_console = Console(stderr=True, soft_wrap=True)
