"""Serving integration: the proxy's RequestRewriter that applies evolved harnesses and routes policies.

The hot path never queries the database: `ServedVersions` is an in-memory snapshot of every agent's
active and canary versions (and canary shares), refreshed in a background thread every few seconds
(and at once by `refresh()` when the control plane in the same process changes something).
Canary assignment is sticky per session: the first request of a session decides, by hashing the
session id into [0, 1), and the choice is remembered; sessions already under way when a canary
starts keep the active version.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from evolvable.control.journal import Journal
from evolvable.control.models import REPLAY_METADATA_KEY, PolicySpec, RolloutState, VersionKind, VersionRecord
from evolvable.control.registry import DEFAULT_TENANT, Registry
from evolvable.control.statistics import Clusterer
from evolvable.control.task_clusters import ClustererStore, FittedClusterer
from evolvable.errors import NotFound
from evolvable.protocol.harness import Harness, LiveValues, render_messages
from evolvable.protocol.models import ChatMessage
from evolvable.proxy.hooks import RewriteResult, SessionContext  # the seam's types; the proxy owns them
from evolvable.store.engine import Engine


def bucket(session_id: str) -> float:
    """A stable point in [0, 1) for a session id; the same on every replica."""
    return int.from_bytes(hashlib.sha256(session_id.encode()).digest()[:8], "big") / 2**64


@dataclass
class AgentVersions:
    harness_active: VersionRecord | None = None
    harness_canary: VersionRecord | None = None
    harness_share: float = 0.0
    policy_active: VersionRecord | None = None
    policy_canary: VersionRecord | None = None
    policy_share: float = 0.0
    harnesses: dict[str, Harness] = field(default_factory=dict)


@dataclass(frozen=True)
class Assignment:
    harness_version: str | None
    policy_version: str | None


_UNASSIGNED = Assignment(None, None)
"""What an agent with no served version runs (frozen, so one instance serves every call)."""


class ServedVersions:
    """Snapshot of what is served, per agent. Replaced atomically on refresh."""

    def __init__(self, registry: Registry, journal: Journal, clusterers: ClustererStore | None = None) -> None:
        self.registry = registry
        self.journal = journal
        self.clusterer_store = clusterers
        self.clusterers: dict[tuple[str, str], FittedClusterer] = {}
        """(tenant, agent) -> the task clusterer fitted from its traffic, for memory retrieval by cluster."""
        self.agents: dict[tuple[str, str], AgentVersions] = {}
        """(tenant, agent) -> what is served: a tenant's requests only ever see its own versions."""
        self.refreshed_at = 0.0

    def refresh(self) -> None:
        agents: dict[tuple[str, str], AgentVersions] = {}
        for record in self.registry.served():
            v = agents.setdefault((record.tenant, record.agent), AgentVersions())
            slot = f"{record.kind.value}_{record.state.value}"
            setattr(v, slot, record)
            if record.kind == VersionKind.harness:
                v.harnesses[record.id] = record.harness()
        for rollout in self.journal.rollouts(states=[RolloutState.running]):
            rolled = agents.get((rollout.tenant, rollout.agent))
            if rolled is not None:
                setattr(rolled, f"{rollout.kind.value}_share", rollout.share)
        self.agents = agents
        if self.clusterer_store is not None:
            self.clusterers = self.clusterer_store.latest_all()
        self.refreshed_at = time.monotonic()


class HarnessRouter:
    """Implements the proxy's `RequestRewriter`: harness application and policy routing per agent."""

    def __init__(
        self,
        engine: Engine,
        *,
        refresh_interval_s: float = 5.0,
        clusterer: Clusterer | None = None,
        max_sessions: int = 100_000,
        learn_clusters: bool = True,
        live_values: LiveValues | None = None,
    ) -> None:
        """`live_values` (governance's, given by the composition root) shows exemplar placeholders as the live
        conversation's own values (`render_messages`); without it exemplars keep their placeholders."""
        self.versions = ServedVersions(
            Registry(engine, tenant=None),
            Journal(engine, tenant=None),
            ClustererStore(engine) if learn_clusters else None,
        )
        self.refresh_interval_s = refresh_interval_s
        self.clusterer = clusterer  # for memory retrieval by cluster
        self.live_values = live_values
        self.max_sessions = max_sessions
        self._sessions: OrderedDict[str, Assignment] = OrderedDict()
        self._replay_harnesses: dict[str, Harness] = {}
        """Harness versions replay sessions pinned (content-addressed, so never stale)."""
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    # ------------------------------------------------------------------ lifecycle

    def refresh(self) -> None:
        self.versions.refresh()

    def start(self) -> None:
        """Load the snapshot now and keep it fresh in a daemon thread."""
        if self._thread is not None:
            return
        self.refresh()
        self._thread = threading.Thread(target=self._loop, name="evolvable-harness-refresh", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _loop(self) -> None:
        while not self._stop.wait(self.refresh_interval_s):
            try:
                self.refresh()
            except Exception:  # a failed refresh keeps serving the last snapshot
                continue

    # ------------------------------------------------------------------ assignment

    def assign(self, agent: str, session_id: str | None, tenant: str = DEFAULT_TENANT) -> Assignment:
        """Which harness and policy version this session runs; sticky once decided."""
        if self._thread is None:
            self.start()
        v = self.versions.agents.get((tenant, agent))
        return _UNASSIGNED if v is None else self._assign_served(v, agent, session_id)

    def _assign_served(self, v: AgentVersions, agent: str, session_id: str | None) -> Assignment:
        """`assign` for an agent with served versions `v`."""
        served = {r.id for r in (v.harness_active, v.harness_canary, v.policy_active, v.policy_canary) if r}
        sticky = f"{agent}\x00{session_id}"  # per agent: sub-agents of one session each get their own versions
        if session_id:
            with self._lock:
                known = self._sessions.get(sticky)
            if known is not None and all(
                x is None or x in served for x in (known.harness_version, known.policy_version)
            ):
                return known
        point = bucket(session_id) if session_id else 1.0

        def pick(active: VersionRecord | None, canary: VersionRecord | None, share: float) -> str | None:
            if canary is not None and point < share:
                return canary.id
            return active.id if active else None

        assignment = Assignment(
            pick(v.harness_active, v.harness_canary, v.harness_share),
            pick(v.policy_active, v.policy_canary, v.policy_share),
        )
        if session_id:
            with self._lock:
                self._sessions[sticky] = assignment
                while len(self._sessions) > self.max_sessions:
                    self._sessions.popitem(last=False)
        return assignment

    def harness_for(
        self, agent: str, session_id: str | None = None, tenant: str = DEFAULT_TENANT
    ) -> tuple[Harness | None, str | None]:
        """The harness an agent of `tenant` should run (for `GET /v1/agents/{name}/harness`)."""
        assignment = self.assign(agent, session_id, tenant)
        v = self.versions.agents.get((tenant, agent))
        if v is None or assignment.harness_version is None:
            return None, None
        return v.harnesses.get(assignment.harness_version), assignment.harness_version

    # ------------------------------------------------------------------ the seam

    def prepare(self, ctx: SessionContext, body: dict[str, Any]) -> RewriteResult:
        agent = ctx.agent or "default"
        if self._thread is None:
            self.start()
        # One lookup of the snapshot serves the assignment and the rest: for an agent with no served version
        # (most calls of a proxy in front of agents not yet evolved) nothing more is looked up or built.
        v = self.versions.agents.get((ctx.tenant_id, agent))
        assignment = _UNASSIGNED if v is None else self._assign_served(v, agent, ctx.session_id)
        replay = self._replay_harness(agent, ctx.metadata, ctx.tenant_id)
        if replay is not None:
            version, harness = replay
            new_body = self.apply_harness(harness, body, ctx) if isinstance(body.get("messages"), list) else body
            return RewriteResult(body=new_body, harness_version=version, policy_version=ctx.policy_version)
        if v is None:
            return RewriteResult(body=body)
        pinned_h, pinned_p = ctx.harness_version, ctx.policy_version
        if pinned_h in v.harnesses or pinned_p in {r.id for r in (v.policy_active, v.policy_canary) if r}:
            # The proxy pinned this session's versions at its first call; keep them while they are served.
            assignment = Assignment(
                pinned_h if pinned_h in v.harnesses else assignment.harness_version,
                pinned_p or assignment.policy_version,
            )
        new_body = body
        if assignment.harness_version and isinstance(body.get("messages"), list):
            harness = v.harnesses[assignment.harness_version]
            new_body = self.apply_harness(harness, body, ctx)
        model, upstream = None, None
        if assignment.policy_version:
            record = next(
                (r for r in (v.policy_active, v.policy_canary) if r and r.id == assignment.policy_version), None
            )
            if record is not None:
                spec = PolicySpec.model_validate(record.content)
                model, upstream = spec.served_model, spec.upstream
                new_body = {**new_body, "model": model}
        return RewriteResult(
            body=new_body,
            harness_version=assignment.harness_version,
            policy_version=assignment.policy_version,
            upstream_name=upstream,
            model=model,
        )

    def _replay_harness(self, agent: str, metadata: Any, tenant: str) -> tuple[str, Harness] | None:
        """The harness a replay session pinned in its metadata, when it is a version of this tenant's agent."""
        pin = metadata.get(REPLAY_METADATA_KEY) if isinstance(metadata, dict) else None
        version = pin.get("harness_version") if isinstance(pin, dict) else None
        if not isinstance(version, str):
            return None
        harness = self._replay_harnesses.get(version)
        if harness is None:
            try:
                record = self.versions.registry.get(version)
            except NotFound:
                return None
            if record.kind != VersionKind.harness or record.agent != agent or record.tenant != tenant:
                return None
            harness = self._replay_harnesses.setdefault(version, record.harness())
        return version, harness

    def apply_harness(
        self, harness: Harness, body: dict[str, Any], ctx: SessionContext | None = None
    ) -> dict[str, Any]:
        """System prompt, skills, retrieved memory and tool descriptions, via the shared `render_messages`."""
        conversation = [ChatMessage.model_validate(m) for m in body["messages"]]
        metadata = (ctx.metadata if ctx is not None else None) or {}
        task_input = ctx.task_input if ctx is not None else None
        task_text = task_input if isinstance(task_input, str) else None
        if task_text is None:
            task_text = next((m.text() for m in conversation if m.role == "user"), "")
        cluster = metadata.get("cluster") if isinstance(metadata, dict) else None
        learned = self.versions.clusterers.get((ctx.tenant_id, ctx.agent)) if ctx is not None else None
        clusterer = learned or self.clusterer
        if cluster is None and clusterer is not None and task_text:
            cluster = clusterer.predict(task_text)
        messages = render_messages(
            harness, conversation, task_text=task_text, cluster=cluster, live_values=self.live_values
        )
        out = {**body, "messages": [m.model_dump(mode="json", exclude_none=True) for m in messages]}
        if isinstance(body.get("tools"), list) and harness.tools:
            out["tools"] = [_with_description(t, harness) for t in body["tools"]]
        return out


def _with_description(tool: dict[str, Any], harness: Harness) -> dict[str, Any]:
    fn = tool.get("function") if isinstance(tool, dict) else None
    spec = harness.tool(fn.get("name", "")) if isinstance(fn, dict) else None
    if spec is None or not isinstance(fn, dict):
        return tool
    return {**tool, "function": {**fn, "description": spec.description}}


__all__ = ["Assignment", "HarnessRouter", "ServedVersions", "bucket"]
