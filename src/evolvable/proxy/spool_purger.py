"""Erasure's reach into a spool no proxy is running on (`evolvable purge --spool-dir`).

The proxy owns its spool's format; governance's `Purger` only calls the `SpoolPurger` it is handed.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from evolvable.proxy.spool import purge_spool


def offline_spool_purger(directory: str | Path) -> Callable[[Callable[[bytes], bool]], int] | None:
    """Purge a spool directory no proxy is running on; None when there is no spool there."""
    path = Path(directory)
    if not path.is_dir():
        return None

    def purge(predicate: Callable[[bytes], bool]) -> int:
        return purge_spool(path, predicate)

    return purge
