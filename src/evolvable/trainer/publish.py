"""Publish a trained adapter: a manifest with lineage, a candidate policy version, hot-loaded servers.

The manifest (`<adapter_dir>.manifest.json`, next to the adapter directory, so the adapter's own
files and hence its content digest never change) records what the adapter is
made of: base model, parent policy version, the data it was trained on (source, filter, sample
counts, exclusions by reason), the config and the metrics. The caller may register it (control
does: the adapter becomes a *candidate* policy version, and the control plane's gates and canary
decide whether it is ever served). Servers that speak vLLM's
LoRA API (the embedded policy server, vLLM) get it via `POST /v1/load_lora_adapter`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evolvable.errors import TrainingError, UpstreamError

if TYPE_CHECKING:
    from evolvable.trainer.loop import TrainingResult

__all__ = [
    "PublishResult",
    "PublishedAdapter",
    "adapter_digest",
    "load_lora",
    "manifest_for",
    "manifest_path",
    "publish",
    "read_manifest",
    "unload_lora",
]

MANIFEST_SCHEMA = "evolvable.published_adapter/1"


@dataclass
class PublishedAdapter:
    """Lineage of one adapter; what the registry stores for a policy version trained here."""

    lora_name: str
    adapter_path: str
    base_model: str
    agent: str = "default"
    parent_policy_version: str | None = None
    data: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    digest: str | None = None
    created_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat())
    policy_version: str | None = None
    schema: str = MANIFEST_SCHEMA


@dataclass
class PublishResult:
    manifest: PublishedAdapter
    manifest_path: str
    policy_version: str | None
    loaded: list[str] = field(default_factory=list)


def adapter_digest(adapter_dir: str | Path) -> str:
    """Content hash of the adapter's weights and config (names and bytes, sorted)."""
    root = Path(adapter_dir)
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def manifest_for(
    result: TrainingResult,
    *,
    agent: str = "default",
    parent_policy_version: str | None = None,
    lora_name: str | None = None,
) -> PublishedAdapter:
    """The manifest of a finished training job."""
    if result.adapter_dir is None:
        raise TrainingError("the job produced no adapter (no usable samples?); nothing to publish")
    digest = adapter_digest(result.adapter_dir)
    return PublishedAdapter(
        lora_name=lora_name or f"{agent}-rl-{digest[:8]}",
        adapter_path=str(Path(result.adapter_dir).resolve()),
        base_model=str(result.config.get("base_model")),
        agent=agent,
        parent_policy_version=parent_policy_version,
        data={**result.data, "sample_stats": result.sample_stats},
        config=result.config,
        metrics=result.metrics,
        digest=digest,
    )


def manifest_path(adapter_dir: str | Path) -> Path:
    adapter_dir = Path(adapter_dir).resolve()
    return adapter_dir.with_name(adapter_dir.name + ".manifest.json")


def read_manifest(adapter_dir: str | Path) -> PublishedAdapter:
    path = manifest_path(adapter_dir)
    try:
        return PublishedAdapter(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError) as err:
        raise TrainingError(f"cannot read adapter manifest {path}: {err}") from None


def load_lora(server: str, lora_name: str, lora_path: str, *, timeout: float = 120.0) -> None:
    """Hot-load an adapter into a vLLM-compatible server; raises UpstreamError when it refuses."""
    _lora_call(server, "load_lora_adapter", {"lora_name": lora_name, "lora_path": lora_path}, timeout)


def unload_lora(server: str, lora_name: str, *, timeout: float = 60.0) -> None:
    """Unload an adapter a server no longer needs to serve (a retired version, a gated-out snapshot)."""
    _lora_call(server, "unload_lora_adapter", {"lora_name": lora_name}, timeout)


def _lora_call(server: str, endpoint: str, body: dict[str, str], timeout: float) -> None:
    import httpx

    url = server.rstrip("/")
    url = url if url.endswith("/v1") else url + "/v1"
    name = body["lora_name"]
    try:
        response = httpx.post(f"{url}/{endpoint}", json=body, timeout=timeout)
    except httpx.HTTPError as err:
        raise UpstreamError(f"cannot reach {server} to {endpoint.split('_')[0]} adapter {name}: {err}") from None
    if response.status_code >= 400:
        raise UpstreamError(
            f"{server} refused adapter {name} ({response.status_code}): {response.text[:300]}",
            status_code=response.status_code,
        )


def publish(
    adapter_dir: str | Path,
    manifest: PublishedAdapter,
    *,
    register: Callable[[PublishedAdapter], str] | None = None,
    servers: list[str] | None = None,
) -> PublishResult:
    """Write the manifest next to the adapter, register it (through the caller's `register`), hot-load servers.

    The trainer never knows the registry: `register` (e.g. `evolvable.control.policies.adapter_registrar`)
    records the manifest as a candidate policy version and returns its id. Every server must load the
    adapter; the first refusal raises UpstreamError (the version stays a candidate, which is never
    served until the control plane moves it on).
    """
    adapter_dir = Path(adapter_dir).resolve()
    if not (adapter_dir / "adapter_config.json").is_file():
        raise TrainingError(f"{adapter_dir} is not a PEFT adapter directory (no adapter_config.json)")
    manifest.adapter_path = str(adapter_dir)
    manifest.digest = manifest.digest or adapter_digest(adapter_dir)
    if register is not None:
        manifest.policy_version = register(manifest)
    path = manifest_path(adapter_dir)
    path.write_text(json.dumps(asdict(manifest), indent=2, default=str))
    loaded = []
    for server in servers or []:
        load_lora(server, manifest.lora_name, str(adapter_dir))
        loaded.append(server)
    return PublishResult(
        manifest=manifest, manifest_path=str(path), policy_version=manifest.policy_version, loaded=loaded
    )
