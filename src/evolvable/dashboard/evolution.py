"""Dashboard JSON for the control plane and for learning over time.

A tenant key sees an agent here only when every recorded run of it is its own tenant's
(`store.tenancy.agents_owned_by`): the control plane keeps versions and decisions per agent name, so an
agent shared by tenants is the operator's (admin keys) to inspect.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Depends
from fastapi.responses import Response

from evolvable.control.models import VersionKind, VersionRecord, VersionState
from evolvable.control.registry import diff_harnesses, render_diff
from evolvable.control.runtime import ControlPlane
from evolvable.control.statistics import load_runs
from evolvable.dashboard.access import Viewer, json_response, viewer
from evolvable.proxy.errors import APIError
from evolvable.store.tenancy import agents_owned_by

_SHOWN_STATES = (VersionState.active, VersionState.canary, VersionState.candidate)


def visible_agents(plane: ControlPlane, v: Viewer) -> list[str]:
    known = plane.registry.agents()
    if v.tenant_scope is None:
        return known
    owned = agents_owned_by(plane.store.engine, v.tenant_scope)
    return [a for a in known if a in owned]


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


def evolution_router(plane: ControlPlane) -> APIRouter:
    api = APIRouter(prefix="/v1/dashboard", tags=["dashboard"])

    async def checked_agent(agent: str | None, v: Viewer) -> list[str]:
        agents = await asyncio.to_thread(visible_agents, plane, v)
        if agent is None:
            return agents
        if agent not in agents:
            raise APIError(404, f"no agent {agent!r}", "invalid_request_error", "not_found")
        return [agent]

    @api.get("/control")
    async def control(agent: str | None = None, v: Viewer = Depends(viewer)) -> Response:
        agents = await checked_agent(agent, v)
        data = await asyncio.to_thread(lambda: [agent_control(plane, a) for a in agents])
        return json_response({"data": data, "can_act": v.principal.is_admin})

    @api.get("/learning")
    async def learning(agent: str | None = None, v: Viewer = Depends(viewer)) -> Response:
        agents = await checked_agent(agent, v)
        data = await asyncio.to_thread(lambda: [agent_learning(plane, a, v.tenant_scope) for a in agents])
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
