"""The registry: content-addressed harness and policy versions with lineage and an explicit state machine.

A harness version's id is `Harness.content_hash()`, so registering the same content twice is a
no-op and equal content always has the same id. A registry is scoped to one tenant (control's view
of an agent is (tenant, agent)); outside the `default` tenant ids are derived from the tenant and
the content, so two tenants' equal harnesses are two versions that never share state. Policy
versions are addressed by their spec (base model, adapter name and path, upstream) plus a digest
of the adapter files when they exist.
Every state change is checked against `TRANSITIONS` and logged in `registry_transitions`.
"""

from __future__ import annotations

import difflib
import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evolvable.control.models import TRANSITIONS, PolicySpec, Transition, VersionKind, VersionRecord, VersionState
from evolvable.errors import ControlError, NotFound
from evolvable.protocol.harness import Harness
from evolvable.store.engine import Engine
from evolvable.store.repos.base import now, utc
from evolvable.store.repos.registry import RegistryChange, RegistryRows, registry_rows

__all__ = ["DEFAULT_TENANT", "Registry", "diff_harnesses", "now", "render_diff", "scoped_id", "utc"]


def _adapter_digest(path: str | None) -> str | None:
    if not path or not Path(path).exists():
        return None
    digest = hashlib.sha256()
    root = Path(path)
    files = sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else [root]
    for f in files:
        digest.update(f.name.encode())
        digest.update(f.read_bytes())
    return digest.hexdigest()[:16]


def policy_version_id(agent: str, spec: PolicySpec) -> str:
    canonical = json.dumps(
        {"agent": agent, **spec.model_dump(mode="json"), "adapter_digest": _adapter_digest(spec.adapter_path)},
        sort_keys=True,
    )
    return "p1-" + hashlib.sha256(canonical.encode()).hexdigest()[:16]


DEFAULT_TENANT = "default"


def scoped_id(tenant: str, content_id: str) -> str:
    """A version id within a tenant: the content address itself in `default`, a tenant-salted one elsewhere."""
    if tenant == DEFAULT_TENANT:
        return content_id
    prefix = content_id[:3]
    return prefix + hashlib.sha256(f"{tenant}\0{content_id}".encode()).hexdigest()[:16]


def _row_to_version(row: Mapping[str, Any]) -> VersionRecord:
    return VersionRecord(
        id=row["id"],
        kind=VersionKind(row["kind"]),
        agent=row["agent"],
        tenant=row["tenant"],
        state=VersionState(row["state"]),
        parent_id=row["parent_id"],
        content=row["content"],
        lineage=row["lineage"] or {},
        note=row["note"] or "",
        created_by=row["created_by"],
        created_at=utc(row["created_at"]),
        updated_at=utc(row["updated_at"]),
    )


def _maybe_version(row: Mapping[str, Any] | None) -> VersionRecord | None:
    return None if row is None else _row_to_version(row)


class Registry:
    """Versions of one tenant's agents' harnesses and policies. Thread-safe; each call is one transaction.

    `tenant=None` reads every tenant (the harness router's snapshot); it registers into `default`.
    `rows` is the registry repository, or the store's engine (wrapped in the SQL one)."""

    def __init__(self, rows: RegistryRows | Engine, tenant: str | None = DEFAULT_TENANT) -> None:
        self.rows = registry_rows(rows)
        self.tenant = tenant

    @property
    def writes_to(self) -> str:
        return self.tenant or DEFAULT_TENANT

    def version_id(self, harness: Harness) -> str:
        """The id `harness` has (or would have) in this registry's tenant."""
        return scoped_id(self.writes_to, harness.content_hash())

    # ------------------------------------------------------------------ registering

    def register_harness(
        self,
        harness: Harness,
        *,
        parent: str | None = None,
        state: VersionState = VersionState.candidate,
        note: str = "",
        created_by: str = "user",
        lineage: dict[str, Any] | None = None,
    ) -> VersionRecord:
        """Store a harness version (idempotent by content). `state=active` makes it the served version."""
        return self._register(
            self.version_id(harness),
            VersionKind.harness,
            harness.agent,
            harness.model_dump(mode="json"),
            parent=parent,
            state=state,
            note=note,
            created_by=created_by,
            lineage=lineage or {},
        )

    def register_policy(
        self,
        agent: str,
        spec: PolicySpec,
        *,
        parent: str | None = None,
        state: VersionState = VersionState.candidate,
        note: str = "",
        created_by: str = "user",
        data_snapshot: str | None = None,
        config: dict[str, Any] | None = None,
        metrics: dict[str, Any] | None = None,
    ) -> VersionRecord:
        """Store a policy version with its lineage: the data snapshot and config it was trained from, metrics."""
        lineage = {"data_snapshot": data_snapshot, "config": config or {}, "metrics": metrics or {}}
        return self._register(
            scoped_id(self.writes_to, policy_version_id(agent, spec)),
            VersionKind.policy,
            agent,
            spec.model_dump(mode="json"),
            parent=parent,
            state=state,
            note=note,
            created_by=created_by,
            lineage=lineage,
        )

    def _register(
        self,
        version_id: str,
        kind: VersionKind,
        agent: str,
        content: dict[str, Any],
        *,
        parent: str | None,
        state: VersionState,
        note: str,
        created_by: str,
        lineage: dict[str, Any],
    ) -> VersionRecord:
        with self.rows.change() as change:
            existing = self._get(change, version_id)
            if existing is None:
                if parent is None and kind == VersionKind.harness:
                    active = change.current(agent, kind.value, VersionState.active.value, tenant=self.writes_to)
                    parent = active["id"] if active else None
                ts = now()
                change.insert_version(
                    {
                        "id": version_id,
                        "kind": kind.value,
                        "agent": agent,
                        "tenant": self.writes_to,
                        "state": VersionState.candidate.value,
                        "parent_id": parent,
                        "content": content,
                        "lineage": lineage,
                        "note": note,
                        "created_by": created_by,
                        "created_at": ts,
                        "updated_at": ts,
                    }
                )
                _log(
                    change,
                    version_id,
                    kind,
                    agent,
                    self.writes_to,
                    None,
                    VersionState.candidate,
                    note or "registered",
                    created_by,
                )
                existing = self._get(change, version_id)
                assert existing is not None
            if state != VersionState.candidate and existing.state != state:
                self._move(change, existing, state, reason=note or f"registered as {state.value}", actor=created_by)
                existing = self._get(change, version_id)
                assert existing is not None
            return existing

    # ------------------------------------------------------------------ reading

    def get(self, version_id: str) -> VersionRecord:
        """A version of this registry's tenant; another tenant's is NotFound, like a missing one."""
        found = _maybe_version(self.rows.version(version_id, tenant=self.tenant))
        if found is None:
            raise NotFound(f"no registry version {version_id!r}")
        return found

    def resolve(self, agent: str, ref: str, kind: VersionKind = VersionKind.harness) -> VersionRecord:
        """A version by id, unique id prefix, or state name ('active', 'canary')."""
        if ref in (VersionState.active, VersionState.canary):
            found = self.current(agent, kind, VersionState(ref))
            if found is None:
                raise NotFound(f"agent {agent!r} has no {ref} {kind.value} version")
            return found
        rows = self.rows.by_prefix(ref, kind.value, tenant=self.tenant)
        if not rows:
            raise NotFound(f"no {kind.value} version matches {ref!r}")
        if len(rows) > 1:
            raise ControlError(f"{ref!r} matches {len(rows)} versions; give more characters")
        return _row_to_version(rows[0])

    def current(self, agent: str, kind: VersionKind, state: VersionState) -> VersionRecord | None:
        return _maybe_version(self.rows.current(agent, kind.value, state.value, tenant=self.writes_to))

    def versions(
        self, agent: str | None = None, kind: VersionKind | None = None, states: list[VersionState] | None = None
    ) -> list[VersionRecord]:
        rows = self.rows.versions(
            tenant=self.tenant,
            agent=agent,
            kind=kind.value if kind is not None else None,
            states=[s.value for s in states] if states else None,
        )
        return [_row_to_version(r) for r in rows]

    def served(self) -> list[VersionRecord]:
        """Every active and canary version: what the proxy's cache holds."""
        return self.versions(states=[VersionState.active, VersionState.canary])

    def agents(self) -> list[str]:
        return self.rows.agents(tenant=self.tenant)

    def tenants(self) -> list[str]:
        """Tenants with any version in this registry's scope."""
        return self.rows.tenants(tenant=self.tenant)

    def lineage(self, version_id: str) -> list[VersionRecord]:
        """The version and its ancestors, newest first."""
        chain: list[VersionRecord] = []
        seen: set[str] = set()
        cursor: str | None = version_id
        while cursor and cursor not in seen:
            seen.add(cursor)
            try:
                record = self.get(cursor)
            except NotFound:
                break
            chain.append(record)
            cursor = record.parent_id
        return chain

    def transitions(self, version_id: str | None = None, agent: str | None = None) -> list[Transition]:
        return [
            Transition(
                version_id=r["version_id"],
                kind=VersionKind(r["kind"]),
                agent=r["agent"],
                tenant=r["tenant"],
                from_state=VersionState(r["from_state"]) if r["from_state"] else None,
                to_state=VersionState(r["to_state"]),
                reason=r["reason"],
                actor=r["actor"],
                at=utc(r["at"]),
            )
            for r in self.rows.transitions(tenant=self.tenant, version_id=version_id, agent=agent)
        ]

    # ------------------------------------------------------------------ erasure

    def erase_exemplars(self, trajectory_ids: set[str], *, reason: str) -> dict[str, int]:
        """Remove, from every harness version of this registry's tenant (any state), the memory exemplars
        copied from `trajectory_ids`, in place: erasure outranks content addressing, so the version keeps its
        id, its content loses the exemplars, and its lineage records what was erased and why."""
        if not trajectory_ids:
            return {"exemplars": 0, "harness_versions": 0}
        erased = versions = 0
        with self.rows.change() as change:
            for row in change.harness_versions(tenant=self.tenant):
                content = row["content"]
                memory = content.get("memory") or []
                keep = [ex for ex in memory if ex.get("source_trajectory_id") not in trajectory_ids]
                if len(keep) == len(memory):
                    continue
                lineage = dict(row["lineage"] or {})
                lineage["erased"] = [
                    *lineage.get("erased", []),
                    {"exemplars": len(memory) - len(keep), "reason": reason},
                ]
                change.set_content(row["id"], {**content, "memory": keep}, lineage, now())
                erased += len(memory) - len(keep)
                versions += 1
        return {"exemplars": erased, "harness_versions": versions}

    # ------------------------------------------------------------------ state changes

    def transition(
        self, version_id: str, to_state: VersionState, *, reason: str = "", actor: str = "user"
    ) -> VersionRecord:
        """Move one version along the transition table. Promoting to active retires the previous active."""
        with self.rows.change() as change:
            record = self._get(change, version_id, lock=True)
            if record is None:
                raise NotFound(f"no registry version {version_id!r}")
            self._move(change, record, to_state, reason=reason, actor=actor)
            result = self._get(change, version_id)
            assert result is not None
            return result

    def start_canary(self, version_id: str, *, reason: str = "", actor: str = "control-plane") -> VersionRecord:
        return self.transition(version_id, VersionState.canary, reason=reason, actor=actor)

    def promote(self, version_id: str, *, reason: str = "", actor: str = "control-plane") -> VersionRecord:
        return self.transition(version_id, VersionState.active, reason=reason, actor=actor)

    def reject(self, version_id: str, *, reason: str = "", actor: str = "control-plane") -> VersionRecord:
        return self.transition(version_id, VersionState.rejected, reason=reason, actor=actor)

    def restore(self, version_id: str, *, reason: str = "restored", actor: str = "user") -> VersionRecord:
        """Make any earlier version active again in one step (the current active is retired)."""
        return self.transition(version_id, VersionState.active, reason=reason, actor=actor)

    def _move(
        self, change: RegistryChange, record: VersionRecord, to_state: VersionState, *, reason: str, actor: str
    ) -> None:
        if record.state == to_state:
            return
        if to_state not in TRANSITIONS[record.state]:
            raise ControlError(
                f"{record.kind.value} version {record.id} cannot go from {record.state.value} to {to_state.value}"
            )
        if to_state in (VersionState.active, VersionState.canary):
            occupant = _maybe_version(
                change.current(record.agent, record.kind.value, to_state.value, tenant=record.tenant, lock=True)
            )
            if occupant is not None and occupant.id != record.id:
                if to_state == VersionState.canary:
                    raise ControlError(
                        f"agent {record.agent!r} already has a {record.kind.value} canary ({occupant.id}); "
                        "promote or roll it back first"
                    )
                _set_state(change, occupant, VersionState.retired, f"replaced by {record.id}", actor)
        _set_state(change, record, to_state, reason, actor)

    def _get(self, change: RegistryChange, version_id: str, lock: bool = False) -> VersionRecord | None:
        return _maybe_version(change.version(version_id, tenant=self.tenant, lock=lock))


def _set_state(change: RegistryChange, record: VersionRecord, to_state: VersionState, reason: str, actor: str) -> None:
    change.set_state(record.id, to_state.value, now())
    _log(change, record.id, record.kind, record.agent, record.tenant, record.state, to_state, reason, actor)


def _log(
    change: RegistryChange,
    version_id: str,
    kind: VersionKind,
    agent: str,
    tenant: str,
    from_state: VersionState | None,
    to_state: VersionState,
    reason: str,
    actor: str,
) -> None:
    change.log_transition(
        {
            "version_id": version_id,
            "kind": kind.value,
            "agent": agent,
            "tenant": tenant,
            "from_state": from_state.value if from_state else None,
            "to_state": to_state.value,
            "reason": reason,
            "actor": actor,
            "at": now(),
        }
    )


# ---------------------------------------------------------------------- diff


def diff_harnesses(a: Harness, b: Harness) -> dict[str, Any]:
    """Per-component difference A -> B: unified diff of the prompt; added/removed/changed skills,
    exemplars and tools (by name or id)."""

    def by_key(items: list[Any], key: str) -> dict[str, Any]:
        return {getattr(i, key): i for i in items}

    def component(old: dict[str, Any], new: dict[str, Any]) -> dict[str, list[str]]:
        return {
            "added": sorted(set(new) - set(old)),
            "removed": sorted(set(old) - set(new)),
            "changed": sorted(k for k in set(old) & set(new) if old[k] != new[k]),
        }

    prompt_diff = list(
        difflib.unified_diff(
            a.system_prompt.splitlines(),
            b.system_prompt.splitlines(),
            "A/system_prompt",
            "B/system_prompt",
            lineterm="",
        )
    )
    tools_a, tools_b = by_key(a.tools, "name"), by_key(b.tools, "name")
    tool_changes = {
        name: list(
            difflib.unified_diff(
                [tools_a[name].description], [tools_b[name].description], f"A/{name}", f"B/{name}", lineterm=""
            )
        )
        for name in set(tools_a) & set(tools_b)
        if tools_a[name] != tools_b[name]
    }
    settings = {
        f: {"a": getattr(a, f), "b": getattr(b, f)}
        for f in ("memory_k", "render_tools_in_prompt")
        if getattr(a, f) != getattr(b, f)
    }
    return {
        "system_prompt": prompt_diff,
        "skills": component(by_key(a.skills, "name"), by_key(b.skills, "name")),
        "memory": component(by_key(a.memory, "id"), by_key(b.memory, "id")),
        "tools": {**component(tools_a, tools_b), "description_diffs": tool_changes},
        "settings": settings,
    }


def render_diff(diff: dict[str, Any]) -> str:
    """The diff as readable text (for the CLI)."""
    lines: list[str] = []
    if diff["system_prompt"]:
        lines += ["== system prompt", *diff["system_prompt"]]
    for comp in ("skills", "memory", "tools"):
        d = diff[comp]
        if d["added"] or d["removed"] or d["changed"]:
            lines.append(f"== {comp}")
            lines += (
                [f"+ {k}" for k in d["added"]] + [f"- {k}" for k in d["removed"]] + [f"~ {k}" for k in d["changed"]]
            )
    for name, tool_diff in diff["tools"].get("description_diffs", {}).items():
        lines += [f"== tool {name}", *tool_diff]
    for f, v in diff["settings"].items():
        lines.append(f"== {f}: {v['a']} -> {v['b']}")
    return "\n".join(lines) if lines else "(no differences)"
