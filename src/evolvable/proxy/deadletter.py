"""Quarantine for spool records the background writer cannot apply (the dead-letter directory).

One bad record must not block every tenant's capture: the writer moves it here, with the error, and
goes on. Entries are files (one per record, written by rename) under `<spool>/deadletter/`, so the
writer process, the proxy and the offline CLI all see the same entries. An admin lists them (without
their content: it is unredacted), replays them into the spool after a fix, or discards them; purges
cover them like the spool.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from evolvable.protocol.models import new_id

_SUFFIX = ".dlq"


@dataclass(frozen=True)
class DeadLetterEntry:
    """What an admin sees of a quarantined record (never its content)."""

    id: str
    tenant_id: str | None
    kind: str | None
    trajectory_id: str | None
    error: str
    quarantined_at: float
    size: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "tenant_id": self.tenant_id,
            "kind": self.kind,
            "trajectory_id": self.trajectory_id,
            "error": self.error,
            "quarantined_at": self.quarantined_at,
            "bytes": self.size,
        }


def _fields(payload: bytes) -> dict[str, Any]:
    """The routing fields of a record, if it parses at all."""
    try:
        rec = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return {}
    return rec if isinstance(rec, dict) else {}


class DeadLetter:
    """The quarantine directory of one spool."""

    def __init__(self, spool_dir: Path) -> None:
        self.directory = Path(spool_dir) / "deadletter"

    def add(self, payload: bytes, error: str) -> DeadLetterEntry:
        """Quarantine one record (durably: write, fsync, rename)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        rec = _fields(payload)
        entry = DeadLetterEntry(
            id=new_id("dlq"),
            tenant_id=_text(rec.get("tenant")),
            kind=_text(rec.get("t")),
            trajectory_id=_text(rec.get("traj")),
            error=error[:2000],
            quarantined_at=time.time(),
            size=len(payload),
        )
        document = orjson.dumps({**entry.as_dict(), "payload": payload.decode("utf-8", "replace")})
        tmp = self.directory / f"{entry.id}.tmp"
        with open(tmp, "wb") as f:
            f.write(document)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.directory / f"{entry.id}{_SUFFIX}")
        return entry

    def _documents(self) -> Iterator[tuple[Path, dict[str, Any]]]:
        if not self.directory.exists():
            return
        for path in sorted(self.directory.glob(f"*{_SUFFIX}")):
            with contextlib.suppress(FileNotFoundError, orjson.JSONDecodeError):
                yield path, orjson.loads(path.read_bytes())

    def entries(self, tenant_id: str | None = None) -> list[DeadLetterEntry]:
        """Quarantined records, oldest first; only `tenant_id`'s when given."""
        out = []
        for _path, doc in self._documents():
            if tenant_id is None or doc.get("tenant_id") == tenant_id:
                out.append(
                    DeadLetterEntry(
                        id=doc["id"],
                        tenant_id=doc.get("tenant_id"),
                        kind=doc.get("kind"),
                        trajectory_id=doc.get("trajectory_id"),
                        error=doc.get("error", ""),
                        quarantined_at=doc.get("quarantined_at", 0.0),
                        size=doc.get("bytes", 0),
                    )
                )
        return out

    def count(self) -> int:
        return sum(1 for _ in self.directory.glob(f"*{_SUFFIX}")) if self.directory.exists() else 0

    def take(self, entry_id: str, tenant_id: str | None = None) -> bytes | None:
        """The record's payload, if the entry exists (and belongs to `tenant_id` when given)."""
        for _path, doc in self._documents():
            if doc.get("id") == entry_id and (tenant_id is None or doc.get("tenant_id") == tenant_id):
                return str(doc["payload"]).encode()
        return None

    def remove(self, entry_id: str) -> bool:
        path = self.directory / f"{entry_id}{_SUFFIX}"
        try:
            path.unlink()
        except FileNotFoundError:
            return False
        return True

    def purge(self, predicate: Callable[[bytes], bool]) -> int:
        """Delete quarantined records whose payload matches (governance purges cover the quarantine)."""
        removed = 0
        for path, doc in self._documents():
            if predicate(str(doc.get("payload", "")).encode()):
                path.unlink(missing_ok=True)
                removed += 1
        return removed


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None
