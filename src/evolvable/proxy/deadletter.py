"""Quarantine for spool records the background writer cannot apply (the dead-letter directory).

One bad record must not block every tenant's capture: the writer moves it here, with the error, and
goes on. Entries are files (one per record, written by rename) under `<spool>/deadletter/`, so the
writer process, the proxy and the offline CLI all see the same entries. An admin lists them (without
their content: it is unredacted), replays them into the spool after a fix, or discards them; purges
cover them like the spool.

Entries hold raw, unredacted records, so they do not stay forever: an entry older than `max_age_s`
(default 7 days, `ProxyConfig.deadletter_max_age_s`) is deleted, counted in `expired` and logged. The
writer asks for that at most once a minute (`expire_due`), also while nothing new is quarantined.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from evolvable.protocol.models import new_id

_SUFFIX = ".dlq"

DEFAULT_MAX_AGE_S = 7 * 24 * 3600.0
"""How long a quarantined (raw) record is kept for an admin to replay or discard."""

EXPIRE_INTERVAL_S = 60.0
"""How often the writer looks for expired entries (a tenth of the maximum age when that is shorter)."""

log = logging.getLogger("evolvable.proxy.deadletter")


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

    def __init__(
        self, spool_dir: Path, *, max_age_s: float = DEFAULT_MAX_AGE_S, clock: Callable[[], float] = time.time
    ) -> None:
        if max_age_s <= 0:
            raise ValueError("max_age_s must be positive")
        self.directory = Path(spool_dir) / "deadletter"
        self.max_age_s = max_age_s
        self.expired = 0
        """Entries deleted by `expire` in this process's lifetime."""
        self._clock = clock
        self._next_expiry = 0.0

    def expire(self) -> int:
        """Delete entries quarantined more than `max_age_s` ago (their raw content included); logs how many."""
        if not self.directory.exists():
            return 0
        cutoff = self._clock() - self.max_age_s
        dropped = 0
        for path in [*self.directory.glob(f"*{_SUFFIX}"), *self.directory.glob("*.tmp")]:
            if self._quarantined_at(path) < cutoff:
                path.unlink(missing_ok=True)
                dropped += 1
        if dropped:
            self.expired += dropped
            log.warning(
                "deleted %d quarantined record(s) older than %.1f days (never replayed; they held raw data)",
                dropped,
                self.max_age_s / 86400,
            )
        return dropped

    @staticmethod
    def _quarantined_at(path: Path) -> float:
        """The entry's own timestamp; the file's mtime for one that does not parse (a write cut short)."""
        try:
            if path.suffix == _SUFFIX:
                with contextlib.suppress(orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                    return float(orjson.loads(path.read_bytes())["quarantined_at"])
            return path.stat().st_mtime
        except FileNotFoundError:  # replayed or discarded meanwhile
            return float("inf")

    def expire_due(self) -> int:
        """`expire`, at most once every EXPIRE_INTERVAL_S (cheap to call from a loop)."""
        now = self._clock()
        if now < self._next_expiry:
            return 0
        self._next_expiry = now + min(EXPIRE_INTERVAL_S, self.max_age_s / 10)
        try:
            return self.expire()
        except OSError:  # retried at the next interval; capture goes on meanwhile
            log.exception("could not delete expired quarantined records in %s", self.directory)
            return 0

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
            quarantined_at=self._clock(),
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
