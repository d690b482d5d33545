"""Dataset snapshots: immutable, versioned selections of curated trajectories, and their exports.

A snapshot copies each selected trajectory (as ATDP JSON) into `dataset_items`, so late signals
or later edits of the store never change what a version means; its content hash covers the items
in order. Purges and retention delete those copies too; a snapshot that lost items is marked
invalidated and refuses to export (create a new version instead). Every export writes a manifest
with the harness and policy version of every trajectory, so stale data is visible downstream.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, fields
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import orjson
from pydantic import BaseModel

from evolvable.errors import ConversionError, GovernanceError, NotFound
from evolvable.governance.audit import AuditAction, AuditLog, safe_filter
from evolvable.governance.curation import (
    Deduplicator,
    DedupMode,
    QualityConfig,
    content_hash,
    conversation_text,
    quality_issues,
)
from evolvable.protocol.models import Trajectory, new_id, utcnow
from evolvable.store import Store
from evolvable.store.repos.datasets import DatasetRows, dataset_rows

ExportFormat = Literal["atdp", "sft", "preference", "rl-samples", "parquet"]
EXPORT_FORMATS: tuple[str, ...] = ("atdp", "sft", "preference", "rl-samples", "parquet")
ALL_TENANTS = "*"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,199}$")
_BATCH = 200


class DatasetInfo(BaseModel):
    id: str
    tenant_id: str
    name: str
    version: int
    filter: dict[str, Any]
    curation: dict[str, Any]
    counts: dict[str, Any]
    content_hash: str
    created_by: str
    created_at: datetime
    exported_at: datetime | None = None
    invalidated_at: datetime | None = None
    invalidated_reason: str | None = None

    @property
    def ref(self) -> str:
        return f"{self.name}@{self.version}"


class ExportResult(BaseModel):
    path: str
    manifest_path: str
    records: int
    skipped: int


def filter_from_dict(spec: dict[str, Any]) -> Any:
    """A TrajectoryFilter from `key=value` pairs (lists for several values; ISO times for bounds)."""
    from evolvable.store import TrajectoryFilter

    known = {f.name for f in fields(TrajectoryFilter)}
    unknown = set(spec) - known
    if unknown:
        raise GovernanceError(f"unknown filter keys {sorted(unknown)}; known: {sorted(known)}")
    values = dict(spec)
    for key in ("started_after", "started_before"):
        if isinstance(values.get(key), str):
            try:
                values[key] = datetime.fromisoformat(values[key])
            except ValueError:
                raise GovernanceError(f"{key} must be an ISO date or time, got {values[key]!r}") from None
    if isinstance(values.get("has_outcome"), str):
        values["has_outcome"] = values["has_outcome"].lower() in {"1", "true", "yes"}
    return TrajectoryFilter(**values)


def filter_to_dict(f: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in asdict(f).items():
        if value is None:
            continue
        out[key] = (
            value.isoformat() if isinstance(value, datetime) else (list(value) if isinstance(value, tuple) else value)
        )
    return out


def _canonical(t: Trajectory) -> bytes:
    return orjson.dumps(t.model_dump(mode="json"), option=orjson.OPT_SORT_KEYS)


class DatasetCatalog:
    """Snapshots of the store's trajectories. Reads and writes nothing but through its repositories:
    building one creates no table (migrations do)."""

    def __init__(self, store: Store, *, audit: AuditLog | None = None, rows: DatasetRows | None = None) -> None:
        self.store = store
        self.rows = rows or dataset_rows(store.engine)
        self.audit = audit or AuditLog(store.engine)

    # ------------------------------------------------------------------ create

    def create(
        self,
        name: str,
        *,
        filter: dict[str, Any] | None = None,
        tenant_id: str | None = None,
        quality: QualityConfig | None = None,
        dedup: DedupMode = "near",
        near_threshold: float = 0.8,
        actor: str = "cli",
        progress: Callable[[int], None] | None = None,
    ) -> DatasetInfo:
        """Snapshot the curated selection as the next version of `name`.

        `tenant_id` scopes the snapshot (API callers always pass theirs); None builds across tenants,
        unless the filter names one tenant."""
        if not _NAME.match(name):
            raise GovernanceError(f"invalid dataset name {name!r}: letters, digits, '_', '.', '-' (max 200)")
        spec = dict(filter or {})
        if tenant_id is not None:
            if spec.get("tenant_id") not in (None, tenant_id):
                raise GovernanceError("a tenant can only build datasets from its own trajectories")
            spec["tenant_id"] = tenant_id
        traj_filter = filter_from_dict(spec)
        scope = spec["tenant_id"] if isinstance(spec.get("tenant_id"), str) else ALL_TENANTS
        quality = quality or QualityConfig()
        dedup_state = Deduplicator(dedup, threshold=near_threshold)
        counts: Counter[str] = Counter()
        harness: Counter[str] = Counter()
        policy: Counter[str] = Counter()
        digest = hashlib.sha256()
        dataset_id = new_id("ds")
        rows: list[dict[str, Any]] = []

        with self.rows.snapshot(scope, name) as snapshot:
            for trajectory in self.store.iter_trajectories(traj_filter):
                counts["scanned"] += 1
                if progress:
                    progress(counts["scanned"])
                text = conversation_text(trajectory)
                issues = quality_issues(trajectory, quality, text)
                if issues:
                    counts["dropped_quality"] += 1
                    counts.update(f"quality:{i}" for i in issues)
                    continue
                duplicate = dedup_state.check(text)
                if duplicate:
                    counts[duplicate] += 1
                    continue
                item_hash = hashlib.sha256(_canonical(trajectory)).hexdigest()
                digest.update(item_hash.encode() + b"\n")
                harness[str(trajectory.harness_version)] += 1
                policy[str(trajectory.policy_version)] += 1
                rows.append(
                    {
                        "dataset_id": dataset_id,
                        "position": counts["kept"],
                        "trajectory_id": trajectory.id,
                        "tenant_id": trajectory.tenant_id,
                        "end_user": trajectory.end_user,
                        "harness_version": trajectory.harness_version,
                        "policy_version": trajectory.policy_version,
                        "started_at": trajectory.started_at,
                        "content_hash": item_hash,
                        "trajectory": trajectory.model_dump(mode="json"),
                    }
                )
                counts["kept"] += 1
                if len(rows) >= _BATCH:
                    snapshot.add_items(rows)
                    rows = []
            snapshot.add_items(rows)
            info = DatasetInfo(
                id=dataset_id,
                tenant_id=scope,
                name=name,
                version=snapshot.version,
                filter=filter_to_dict(traj_filter),
                curation={"quality": quality.model_dump(mode="json"), "dedup": dedup, "near_threshold": near_threshold},
                counts={
                    **{
                        k: counts.get(k, 0)
                        for k in ("scanned", "kept", "dropped_quality", "duplicate_exact", "duplicate_near")
                    },
                    "quality_reasons": {k.split(":", 1)[1]: v for k, v in counts.items() if k.startswith("quality:")},
                    "harness_versions": dict(harness),
                    "policy_versions": dict(policy),
                },
                content_hash="sha256:" + digest.hexdigest(),
                created_by=actor,
                created_at=utcnow(),
            )
            snapshot.finish(
                info.model_dump(exclude={"exported_at", "invalidated_at", "invalidated_reason"}),
                self.audit.entry(
                    AuditAction.read,
                    actor=actor,
                    tenant_id=None if scope == ALL_TENANTS else scope,
                    target=f"dataset:{info.ref}",
                    details={"created": dataset_id, "kept": info.counts["kept"], "filter": safe_filter(info.filter)},
                ),
            )
        return info

    # ------------------------------------------------------------------ read

    def list(self, tenant_id: str | None = None) -> list[DatasetInfo]:
        return [DatasetInfo.model_validate(dict(r)) for r in self.rows.datasets(tenant_id)]

    def get(self, ref: str, *, tenant_id: str | None = None) -> DatasetInfo:
        """`NAME` (latest version) or `NAME@VERSION`; scoped to `tenant_id` when given (else any scope)."""
        name, _, version = ref.partition("@")
        if version and not version.isdigit():
            raise GovernanceError(f"bad dataset version in {ref!r}: use NAME@N")
        rows = self.rows.versions(name, tenant_id=tenant_id, version=int(version) if version else None)
        if not rows:
            raise NotFound(f"dataset {ref!r} does not exist")
        scopes = {r["tenant_id"] for r in rows}
        if len(scopes) > 1 and tenant_id is None:
            raise GovernanceError(f"dataset {ref!r} exists for several tenants {sorted(scopes)}; pass the tenant")
        return DatasetInfo.model_validate(dict(rows[0]))

    def iter_items(self, dataset_id: str) -> Iterator[Trajectory]:
        """The snapshot's trajectories in order, read in batches (bounded memory)."""
        position = -1
        while True:
            rows = self.rows.items(dataset_id, after=position, limit=_BATCH)
            if not rows:
                return
            for _, trajectory in rows:
                yield Trajectory.model_validate(trajectory)
            position = rows[-1][0]

    # ------------------------------------------------------------------ export

    def export(
        self,
        ref: str,
        fmt: str,
        path: str | Path,
        *,
        tenant_id: str | None = None,
        actor: str = "cli",
    ) -> ExportResult:
        if fmt not in EXPORT_FORMATS:
            raise GovernanceError(f"unknown export format {fmt!r}: use one of {', '.join(EXPORT_FORMATS)}")
        info = self.get(ref, tenant_id=tenant_id)
        if info.invalidated_at is not None:
            raise GovernanceError(
                f"dataset {info.ref} was invalidated ({info.invalidated_reason}); create a new version to export"
            )
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".part")
        provenance: list[dict[str, Any]] = []

        def items() -> Iterator[Trajectory]:
            for t in self.iter_items(info.id):
                provenance.append(
                    {"id": t.id, "harness_version": t.harness_version, "policy_version": t.policy_version}
                )
                yield t

        records, skipped = _WRITERS[fmt](items(), tmp)
        os.replace(tmp, path)
        manifest = {
            "dataset": info.model_dump(mode="json"),
            "format": fmt,
            "file": path.name,
            "exported_at": utcnow().isoformat(),
            "records": records,
            "skipped": skipped,
            "harness_versions": dict(Counter(str(p["harness_version"]) for p in provenance)),
            "policy_versions": dict(Counter(str(p["policy_version"]) for p in provenance)),
            "trajectories": provenance,
        }
        manifest_path = path.with_name(path.name + ".manifest.json")
        manifest_path.write_bytes(orjson.dumps(manifest, option=orjson.OPT_INDENT_2))
        self.rows.exported(
            info.id,
            first=info.exported_at is None,
            at=utcnow(),
            audit=self.audit.entry(
                AuditAction.export,
                actor=actor,
                tenant_id=None if info.tenant_id == ALL_TENANTS else info.tenant_id,
                target=f"dataset:{info.ref}",
                details={"format": fmt, "records": records, "file": path.name, "content_hash": info.content_hash},
            ),
        )
        return ExportResult(path=str(path), manifest_path=str(manifest_path), records=records, skipped=skipped)


# ---------------------------------------------------------------------- writers


def _write_jsonl(records: Iterator[dict[str, Any]], path: Path) -> int:
    count = 0
    with path.open("wb") as out:
        for record in records:
            out.write(orjson.dumps(record) + b"\n")
            count += 1
    return count


def _atdp(items: Iterator[Trajectory], path: Path) -> tuple[int, int]:
    return _write_jsonl((t.model_dump(mode="json") for t in items), path), 0


def _sft(items: Iterator[Trajectory], path: Path) -> tuple[int, int]:
    from evolvable.protocol.converters import to_sft_record

    skipped = 0

    def records() -> Iterator[dict[str, Any]]:
        nonlocal skipped
        for t in items:
            record = to_sft_record(t)
            if record is None:
                skipped += 1
                continue
            yield record

    return _write_jsonl(records(), path), skipped


def _preference(items: Iterator[Trajectory], path: Path) -> tuple[int, int]:
    from evolvable.protocol.converters import to_preference_pairs

    return _write_jsonl(iter(to_preference_pairs(items)), path), 0


def _rl_samples(items: Iterator[Trajectory], path: Path) -> tuple[int, int]:
    from evolvable.protocol.converters import trajectory_to_samples

    skipped = 0

    def records() -> Iterator[dict[str, Any]]:
        nonlocal skipped
        for t in items:
            try:
                samples = trajectory_to_samples(t)
            except ConversionError:
                skipped += 1
                continue
            yield from (s.model_dump(mode="json") for s in samples)

    return _write_jsonl(records(), path), skipped


PARQUET_COLUMNS = (
    "id",
    "tenant",
    "agent",
    "harness_version",
    "policy_version",
    "status",
    "outcome",
    "steps",
    "signals",
)


def _parquet(items: Iterator[Trajectory], path: Path) -> tuple[int, int]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema(
        [
            ("id", pa.string()),
            ("tenant", pa.string()),
            ("agent", pa.string()),
            ("harness_version", pa.string()),
            ("policy_version", pa.string()),
            ("status", pa.string()),
            ("outcome", pa.float64()),
            ("steps", pa.string()),
            ("signals", pa.string()),
        ]
    )
    count = 0
    batch: list[dict[str, Any]] = []
    with pq.ParquetWriter(str(path), schema) as writer:

        def flush() -> None:
            if batch:
                writer.write_table(pa.Table.from_pylist(batch, schema=schema))
                batch.clear()

        for t in items:
            data = t.model_dump(mode="json", include={"steps", "signals"})
            batch.append(
                {
                    "id": t.id,
                    "tenant": t.tenant_id,
                    "agent": t.agent,
                    "harness_version": t.harness_version,
                    "policy_version": t.policy_version,
                    "status": t.status.value,
                    "outcome": t.outcome(),
                    "steps": orjson.dumps(data["steps"]).decode(),
                    "signals": orjson.dumps(data["signals"]).decode(),
                }
            )
            count += 1
            if len(batch) >= _BATCH:
                flush()
        flush()
    return count, 0


_WRITERS: dict[str, Callable[[Iterator[Trajectory], Path], tuple[int, int]]] = {
    "atdp": _atdp,
    "sft": _sft,
    "preference": _preference,
    "rl-samples": _rl_samples,
    "parquet": _parquet,
}

__all__ = ["EXPORT_FORMATS", "DatasetCatalog", "DatasetInfo", "ExportResult", "content_hash", "filter_from_dict"]
