"""Dashboard JSON for the control plane and for learning over time.

The control plane keeps versions, decisions and rollouts per (tenant, agent): a tenant key reads its own
tenant's plane only; an admin key sees every tenant's (or one, with `?tenant=`).
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Depends
from fastapi.responses import Response

from evolvable.control.models import VersionKind, VersionRecord, VersionState
from evolvable.control.registry import Registry, diff_harnesses, render_diff
from evolvable.control.runtime import ControlPlane
from evolvable.control.statistics import load_runs
from evolvable.control.tenancy import ControlPlanes
from evolvable.dashboard.access import Viewer, json_response, viewer
from evolvable.errors import ResourceNotFound

_SHOWN_STATES = (VersionState.active, VersionState.canary, VersionState.candidate)


def visible_agents(planes: ControlPlanes, v: Viewer) -> list[tuple[ControlPlane, str]]:
    """(tenant's plane, agent) pairs the viewer may read."""
    tenants = [v.tenant_scope] if v.tenant_scope is not None else Registry(planes.leader.engine, tenant=None).tenants()
    return [(plane, agent) for plane in map(planes.plane, tenants) for agent in plane.registry.agents()]


def _version(record: VersionRecord, active: VersionRecord | None, plane: ControlPlane) -> dict[str, Any]:
    out = record.model_dump(mode="json", exclude={"content"})
    out["lineage_chain"] = [r.id for r in plane.registry.lineage(record.id)]
    if record.kind == VersionKind.harness and active is not None and record.id != active.id:
        out["diff_from_active"] = render_diff(diff_harnesses(active.harness(), record.harness()))
    if record.kind == VersionKind.policy:
        out["policy"] = record.content
    return out


def agent_control(plane: ControlPlane, agent: str) -> dict[str, Any]:
    """Versions (active, canary, candidates with lineage and diffs), rollouts and decisions of one agent."""
    versions: dict[str, list[dict[str, Any]]] = {}
    for kind in VersionKind:
        active = plane.registry.current(agent, kind, VersionState.active)
        records = plane.registry.versions(agent, kind, list(_SHOWN_STATES))
        versions[kind.value] = [_version(r, active, plane) for r in reversed(records)]
    return {
        "agent": agent,
        "versions": versions,
        "rollouts": [r.model_dump(mode="json") for r in plane.journal.rollouts(agent)[:20]],
        "decisions": [d.model_dump(mode="json") for d in plane.journal.decisions(agent, None, 50)],
    }


def agent_learning(plane: ControlPlane, agent: str, tenant: str | None) -> dict[str, Any]:
    """Runs over time (success, reward, cluster, versions), version changes, decisions' before/after,
    and training runs recorded on policy versions."""
    runs = load_runs(plane.store, agent, limit=2000, clusterer=plane.clusterer, tenant_id=tenant)
    changes = [
        t.model_dump(mode="json")
        for t in plane.registry.transitions(agent=agent)
        if t.to_state in (VersionState.active, VersionState.canary)
    ]
    decisions = [
        {
            "id": d.id,
            "lever": d.lever.value,
            "state": d.state.value,
            "verdict": d.verdict.value if d.verdict else None,
            "created_at": d.created_at.isoformat(),
            "predicted": d.predicted,
            "before": d.evidence.get("before", {}),
            "measured": d.verdict_detail or {},
        }
        for d in plane.journal.decisions(agent, None, 100)
    ]
    training = [
        {"version": r.id, "state": r.state.value, "created_at": r.created_at.isoformat(), **r.lineage}
        for r in plane.registry.versions(agent, VersionKind.policy)
        if r.lineage.get("metrics")
    ]
    return {
        "agent": agent,
        "runs": [
            {
                "id": r.trajectory_id,
                "at": r.started_at.isoformat(),
                "cluster": r.cluster,
                "success": r.success,
                "reward": r.reward,
                "harness_version": r.harness_version,
                "policy_version": r.policy_version,
            }
            for r in runs
        ],
        "version_changes": changes,
        "decisions": decisions,
        "training": training,
    }


def evolution_router(planes: ControlPlanes) -> APIRouter:
    api = APIRouter(prefix="/v1/dashboard", tags=["dashboard"])

    async def checked_agent(agent: str | None, v: Viewer) -> list[tuple[ControlPlane, str]]:
        pairs = await asyncio.to_thread(visible_agents, planes, v)
        if agent is None:
            return pairs
        found = [(p, a) for p, a in pairs if a == agent]
        if not found:
            raise ResourceNotFound(f"no agent {agent!r}")
        return found

    @api.get("/control")
    async def control(agent: str | None = None, v: Viewer = Depends(viewer)) -> Response:
        pairs = await checked_agent(agent, v)
        data = await asyncio.to_thread(lambda: [{**agent_control(p, a), "tenant": p.tenant} for p, a in pairs])
        return json_response({"data": data, "can_act": v.principal.is_admin})

    @api.get("/learning")
    async def learning(agent: str | None = None, v: Viewer = Depends(viewer)) -> Response:
        pairs = await checked_agent(agent, v)
        data = await asyncio.to_thread(
            lambda: [{**agent_learning(p, a, p.tenant), "tenant": p.tenant} for p, a in pairs]
        )
        return json_response({"data": data})

    return api


def without_control_router() -> APIRouter:
    """The same two endpoints on a proxy run with `--no-control`: authenticated, and empty."""
    api = APIRouter(prefix="/v1/dashboard", tags=["dashboard"])

    @api.get("/control")
    async def control(v: Viewer = Depends(viewer)) -> Response:
        return json_response({"data": [], "can_act": False, "control_plane": False})

    @api.get("/learning")
    async def learning(v: Viewer = Depends(viewer)) -> Response:
        return json_response({"data": [], "control_plane": False})

    return api
