"""Purge and retention reach the control plane: exemplars copied from erased runs leave every harness version.

`exemplar_eraser(engine)` is a governance `DerivedEraser`: the composition root hands it to the purger
(API, CLI and retention all use it), governance records its counts in the purge's audit entry, and
the harness router serves the scrubbed versions from its next refresh.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy.engine import Engine

from evolvable.control.registry import Registry


def exemplar_eraser(engine: Engine) -> Callable[[str | None, set[str], str], dict[str, int]]:
    def erase(tenant_id: str | None, trajectory_ids: set[str], reason: str) -> dict[str, int]:
        return Registry(engine, tenant=tenant_id).erase_exemplars(trajectory_ids, reason=reason)

    return erase
