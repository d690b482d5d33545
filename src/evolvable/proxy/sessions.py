"""Sessions: one agent run = one trajectory, tied to calls by a session key or header.

Lookups on the request path hit an in-memory cache; a miss (another replica created the session, or
the proxy restarted) falls back to the `proxy_sessions` table once. Creating a session writes its
row directly (one small insert, not on the per-call path) so the key works at once on every replica;
the trajectory header itself goes through the spool and governance like everything else.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

import orjson

from evolvable.protocol.models import TrajectoryStatus, new_id, utcnow
from evolvable.proxy.hooks import SessionContext
from evolvable.proxy.records import SessionRecord
from evolvable.store import Store
from evolvable.store.repos.sessions import Row, SessionRows, SqlSessionRows

KEY_PREFIX = "evs_"
"""Session keys start with it, so a bearer token is recognized as one without a lookup."""


MAX_CACHED_TASK_TEXT = 4096
"""A session keeps its task input in memory (for the rewriter) only as text up to this many characters:
thousands of cached sessions must not pin megabytes each until their idle timeout."""


def cacheable_task_input(task_input: Any) -> str | None:
    """What the cache keeps of a task input: short text only (the full input goes to the spool)."""
    return task_input if isinstance(task_input, str) and len(task_input) <= MAX_CACHED_TASK_TEXT else None


MAX_CACHED_METADATA_BYTES = 16 * 1024


def cacheable_metadata(metadata: dict[str, Any]) -> dict[str, Any]:
    """What the cache keeps of session metadata: all of it when small, else its short scalar entries
    (e.g. `cluster`, which the rewriter reads); the full metadata goes to the spool."""
    if len(orjson.dumps(metadata, default=str)) <= MAX_CACHED_METADATA_BYTES:
        return metadata
    return {
        k: v for k, v in metadata.items() if isinstance(v, int | float | bool) or (isinstance(v, str) and len(v) <= 256)
    }


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def new_session_id() -> str:
    """A session's id, which is also its trajectory's id."""
    return new_id("traj")


@dataclass
class Session:
    id: str
    tenant_id: str
    agent: str
    key_hash: str
    task_id: str | None = None
    task_input: Any = None
    end_user: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    harness_version: str | None = None
    policy_version: str | None = None
    status: str = TrajectoryStatus.running.value
    created_at: datetime = field(default_factory=utcnow)
    last_activity: float = field(default_factory=time.monotonic)
    calls: int = 0
    versions_recorded: bool = False
    last_agent: str | None = None
    """The agent of the session's latest call (sub-agents name themselves per call); handoffs are recorded."""
    minted_by: str | None = None
    """The API key id that created the session: its session key dies when that key is revoked."""

    @property
    def running(self) -> bool:
        return self.status == TrajectoryStatus.running.value

    def call_context(self, agent: str, endpoint: str, end_user: str | None) -> SessionContext:
        """What the rewriter is told about a call in this session: the cached run header, pinned versions
        and how many calls came before (`agent` differs from the session's for a sub-agent's call)."""
        return SessionContext(
            tenant_id=self.tenant_id,
            agent=agent,
            trajectory_id=self.id,
            session_id=self.id,
            endpoint=endpoint,
            task_id=self.task_id,
            task_input=self.task_input,
            end_user=end_user,
            metadata=self.metadata,
            harness_version=self.harness_version,
            policy_version=self.policy_version,
            call_index=self.calls,
        )

    def record(self, task_input: Any, metadata: dict[str, Any]) -> SessionRecord:
        """The run header as it goes to the spool; the full `task_input` and `metadata` the client sent,
        of which the cache keeps only the short parts (`cacheable_task_input`, `cacheable_metadata`)."""
        return SessionRecord(
            id=self.id,
            trajectory_id=self.id,
            tenant_id=self.tenant_id,
            agent=self.agent,
            run_agent=self.agent,
            end_user=self.end_user,
            task_id=self.task_id,
            task_input=task_input,
            metadata=metadata,
            harness_version=self.harness_version,
            policy_version=self.policy_version,
            at=self.created_at.timestamp(),
        )


class IdentifierRedactor(Protocol):
    """The governor's `redact_identifiers`: what of a session's client-named identifiers may be stored."""

    def __call__(self, trajectory_id: str, identifiers: dict[str, str | None]) -> dict[str, str | None]: ...


class SessionManager:
    """In-memory session cache in front of the `proxy_sessions` table. Safe to use from the event loop
    for cache hits; `load_*` and `create` do blocking I/O and run in a worker thread.

    `redact_identifiers` (the governor's) redacts the agent and task id before they reach the table, as the
    trajectory header's same fields are redacted; the cached session keeps them as the client sent them. A
    session reloaded from the table (another replica, a restart) carries the stored, redacted forms."""

    def __init__(
        self, store: Store, redact_identifiers: IdentifierRedactor | None = None, rows: SessionRows | None = None
    ) -> None:
        self.store = store
        self.rows = rows or SqlSessionRows(store.engine)
        self._redact_identifiers = redact_identifiers
        self._by_id: dict[str, Session] = {}
        self._by_key: dict[str, Session] = {}

    # ----------------------------------------------------------------- request path

    def cached_by_key(self, key: str) -> Session | None:
        return self._by_key.get(hash_key(key))

    def cached_by_id(self, session_id: str) -> Session | None:
        return self._by_id.get(session_id)

    def touch(self, session: Session) -> None:
        session.last_activity = time.monotonic()

    # ----------------------------------------------------------------- blocking (worker thread)

    def create(
        self,
        *,
        tenant_id: str,
        agent: str,
        task_id: str | None,
        task_input: Any,
        end_user: str | None,
        metadata: dict[str, Any],
        harness_version: str | None = None,
        policy_version: str | None = None,
        session_id: str | None = None,
        minted_by: str | None = None,
    ) -> tuple[Session, str]:
        """A new session and its API key (returned once, stored hashed). `session_id`: one drawn by the
        caller with `new_session_id()` (to pin versions by it before the session exists)."""
        key = KEY_PREFIX + secrets.token_urlsafe(32)
        session = Session(
            id=session_id or new_session_id(),
            tenant_id=tenant_id,
            agent=agent,
            key_hash=hash_key(key),
            task_id=task_id,
            task_input=cacheable_task_input(task_input),
            end_user=end_user,
            metadata=cacheable_metadata(metadata),
            harness_version=harness_version,
            policy_version=policy_version,
            versions_recorded=harness_version is not None or policy_version is not None,
            minted_by=minted_by,
        )
        stored: dict[str, str | None] = {"agent": agent, "task_id": task_id}
        if self._redact_identifiers is not None:
            stored = self._redact_identifiers(session.id, stored)
        self.rows.insert(
            {
                "id": session.id,
                "tenant_id": tenant_id,
                "agent": stored["agent"],
                "key_hash": session.key_hash,
                "task_id": stored["task_id"],
                "end_user": end_user,
                "harness_version": harness_version,
                "policy_version": policy_version,
                "status": session.status,
                "created_at": session.created_at,
                "minted_by": minted_by,
            }
        )
        self._cache(session)
        return session, key

    def load_by_key(self, key: str) -> Session | None:
        return self._load(self.rows.by_key_hash(hash_key(key)))

    def load_by_id(self, session_id: str) -> Session | None:
        return self._load(self.rows.by_id(session_id))

    def load_running(self) -> int:
        """Cache every running session (after a restart), so idle timeouts keep applying to them."""
        sessions = [self._from_row(r) for r in self.rows.running()]
        for s in sessions:
            self._cache(s)
        return len(sessions)

    def mark_ended(self, session_ids: list[str], status: str, ended_at: datetime) -> None:
        """Called by the background writer when an end record was applied."""
        self.rows.set_ended(session_ids, status, ended_at)

    def record_versions(self, session_id: str, harness_version: str | None, policy_version: str | None) -> None:
        self.rows.set_versions(session_id, harness_version, policy_version)

    # ----------------------------------------------------------------- cache maintenance

    def end(self, session: Session, status: str) -> None:
        """Mark ended in memory and in the table at once (blocking: run in a worker thread), so the
        session key stops working on every replica now, not when the writer applies the end record."""
        session.status = status
        self._by_id.pop(session.id, None)
        self._by_key.pop(session.key_hash, None)
        self.rows.end_running(session.id, status)

    def idle(self, timeout_s: float) -> list[Session]:
        cutoff = time.monotonic() - timeout_s
        return [s for s in list(self._by_id.values()) if s.running and s.last_activity < cutoff]

    def __len__(self) -> int:
        return len(self._by_id)

    def _cache(self, session: Session) -> None:
        if session.running:
            self._by_id[session.id] = session
            self._by_key[session.key_hash] = session

    def _load(self, row: Row | None) -> Session | None:
        if row is None:
            return None
        session = self._from_row(row)
        cached = self._by_id.get(session.id)
        if cached is not None:
            return cached
        if session.running:
            try:
                header = self.store.get_header(session.id)
                session.task_input = cacheable_task_input(header.task_input)
                session.metadata = cacheable_metadata(dict(header.metadata))
            except Exception:  # header not applied yet: the rewriter sees no task input, capture is unaffected
                pass
        self._cache(session)
        return session

    @staticmethod
    def _from_row(row: Row) -> Session:
        return Session(
            id=row["id"],
            tenant_id=row["tenant_id"],
            agent=row["agent"],
            key_hash=row["key_hash"],
            task_id=row["task_id"],
            end_user=row["end_user"],
            harness_version=row["harness_version"],
            policy_version=row["policy_version"],
            status=row["status"],
            created_at=row["created_at"],
            versions_recorded=row["harness_version"] is not None or row["policy_version"] is not None,
            calls=1,
            minted_by=row["minted_by"],
        )
