"""Purge and retention reach the control plane: what was built from erased runs is erased or flagged.

- `exemplar_eraser(engine)`: exemplars copied from erased runs leave every harness version (the
  harness router serves the scrubbed versions from its next refresh).
- `WeightsErasure(registry)`: an adapter trained on erased runs is listed in the purge report and the
  audit log and, by the tenant's policy, retired (its parent version serves again; a canary or
  candidate is rejected) or flagged for retraining (the next weights job cannot see the purged runs:
  they are gone from the store).

Both are governance `DerivedEraser`s: the composition root hands them to the purger (API, CLI and
retention all use them); governance never imports the control plane.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from evolvable.control.adapters import AdapterSync
from evolvable.control.models import VersionKind, VersionRecord, VersionState
from evolvable.control.registry import Registry
from evolvable.store.engine import Engine


def exemplar_eraser(engine: Engine) -> Callable[[str | None, set[str], str], dict[str, int]]:
    def erase(tenant_id: str | None, trajectory_ids: set[str], reason: str) -> dict[str, int]:
        return Registry(engine, tenant=tenant_id).erase_exemplars(trajectory_ids, reason=reason)

    return erase


ErasurePolicy = Literal["retire", "retrain"]
SERVING = (VersionState.active, VersionState.canary, VersionState.candidate)


def trained_on(record: VersionRecord) -> set[str]:
    """Trajectory ids a policy version's adapter was trained on (its lineage's data snapshot)."""
    raw = record.lineage.get("data_snapshot")
    if not raw:
        return set()
    try:
        data = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        return set()
    return set(data.get("trajectory_ids") or []) if isinstance(data, dict) else set()


@dataclass
class WeightsErasure:
    registry: Registry
    policy: ErasurePolicy = "retire"
    tenant_policies: Mapping[str, ErasurePolicy] = field(default_factory=dict)
    """Per-tenant choice; tenants not listed get `policy`."""
    adapters: AdapterSync | None = None
    """Unloads retired adapters from the policy servers (and loads the restored parent's) right away."""

    def __call__(self, tenant_id: str | None, purged_ids: set[str], reason: str) -> dict[str, Any]:
        """A governance `DerivedEraser`: flag (and by policy retire) every serving adapter that learnt from
        a purged trajectory; the purge report lists them under `adapters`."""
        if not purged_ids:
            return {}
        affected = []
        for record in self.registry.versions(kind=VersionKind.policy, states=list(SERVING)):
            hits = trained_on(record) & purged_ids
            if hits:
                affected.append(self._act(record, len(hits)))
        if not affected:
            return {}
        report: dict[str, Any] = {"adapters": affected}
        if self.adapters is not None and any(a["action"] != "flagged for retraining" for a in affected):
            report["policy_servers"] = self.adapters.sync(Registry(self.registry.rows, tenant=None))
        return report

    def _act(self, record: VersionRecord, hits: int) -> dict[str, Any]:
        policy = self.tenant_policies.get(record.tenant or "", self.policy)
        reason = f"trained on {hits} purged trajectories"
        action = "flagged for retraining"
        if policy == "retire":
            action = self._retire(record, reason)
        return {"policy_version": record.id, "agent": record.agent, "purged_trajectories": hits, "action": action}

    def _retire(self, record: VersionRecord, reason: str) -> str:
        if record.state != VersionState.active:
            self.registry.reject(record.id, reason=reason, actor="erasure")
            return "rejected"
        parent = record.parent_id
        if parent is None:
            return "flagged: active with no earlier version to restore; retrain or roll back by hand"
        self.registry.restore(parent, reason=f"{record.id} {reason}", actor="erasure")
        return f"retired; {parent} restored"


def control_erasers(
    engine: Engine, weights_policy: ErasurePolicy = "retire", policy_servers: tuple[str, ...] = ()
) -> tuple[Any, ...]:
    """Everything the control plane builds from runs, as erasers for governance's purger. Adapters retired
    by a purge leave `policy_servers` at once."""
    adapters = AdapterSync(policy_servers) if policy_servers else None
    weights = WeightsErasure(Registry(engine, tenant=None), policy=weights_policy, adapters=adapters)
    return (exemplar_eraser(engine), weights)
