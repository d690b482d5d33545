"""Policy versions from trained adapters: registration is the control plane's job, not the trainer's."""

from __future__ import annotations

import json
from collections.abc import Callable

from evolvable.control.models import PolicySpec
from evolvable.control.registry import Registry
from evolvable.trainer.publish import PublishedAdapter


def adapter_registrar(registry: Registry, *, created_by: str = "trainer") -> Callable[[PublishedAdapter], str]:
    """A `register` callback for `trainer.publish`: records the adapter as a candidate policy version."""

    def register(manifest: PublishedAdapter) -> str:
        record = registry.register_policy(
            manifest.agent,
            PolicySpec(
                base_model=manifest.base_model, lora_name=manifest.lora_name, adapter_path=manifest.adapter_path
            ),
            parent=manifest.parent_policy_version,
            note=f"RL adapter trained on {manifest.data.get('sample_stats', {}).get('samples', '?')} samples",
            created_by=created_by,
            data_snapshot=json.dumps({k: v for k, v in manifest.data.items() if k != "sample_stats"}, sort_keys=True),
            config=manifest.config,
            metrics={**manifest.metrics, "sample_stats": manifest.data.get("sample_stats", {})},
        )
        return record.id

    return register


def version_chain(registry: Registry, current_policy_version: str) -> list[str]:
    """Policy versions oldest to newest ending at `current_policy_version` (for RLConfig.policy_versions)."""
    return [record.id for record in reversed(registry.lineage(current_policy_version))]
