"""Dashboard JSON for runs: the filtered list, one run in full, feedback, and the annotation queue.

Everything is read through the store with the viewer's tenant scope; feedback is written like any other
signal, through the proxy's spool, so governance (redaction of the comment) sees it before the store.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field

from evolvable.control.statistics import Clusterer, summarize
from evolvable.dashboard.access import Viewer, json_response, viewer
from evolvable.errors import InvalidRequest, NotFound, ResourceNotFound
from evolvable.protocol.models import LLMCallStep, SignalKind, Trajectory, TrajectoryStatus, new_id, utcnow
from evolvable.proxy.records import SignalRecord
from evolvable.store import InvalidCursor, Store, TrajectoryFilter
from evolvable.store.reviews import recent_signals, trajectories_with_signal

JUDGE_UNSURE_CONFIDENCE = 0.6
"""A judge signal below this confidence, or with a value in `JUDGE_MIDDLING`, queues its run for a person."""
JUDGE_MIDDLING = (0.35, 0.65)


def run_row(t: Trajectory, clusterer: Clusterer | None) -> dict[str, Any]:
    """One line of the runs table: identity, versions, cluster, success, reward, signals at a glance."""
    summary = summarize(t, clusterer=clusterer)
    run_signals: dict[str, float] = {}
    for s in t.signals:
        if s.step_id is None:
            run_signals[s.kind.value] = s.value
    tokens = sum(s.usage.total_tokens for s in t.steps if isinstance(s, LLMCallStep) and s.usage is not None)
    return {
        "id": t.id,
        "tenant_id": t.tenant_id,
        "agent": t.agent,
        "status": t.status.value,
        "harness_version": t.harness_version,
        "policy_version": t.policy_version,
        "started_at": t.started_at.isoformat(),
        "ended_at": t.ended_at.isoformat() if t.ended_at else None,
        "steps": len(t.steps),
        "tokens": tokens,
        "cluster": summary.cluster,
        "success": summary.success,
        "reward": summary.reward,
        "signals": run_signals,
        "feedback": sum(1 for s in t.signals if s.kind == SignalKind.user_feedback),
    }


def _signal_matches(t: Trajectory, kind: str | None, low: float | None, high: float | None) -> bool:
    if kind is None and low is None and high is None:
        return True
    return any(
        (kind is None or s.kind.value == kind) and (low is None or s.value >= low) and (high is None or s.value <= high)
        for s in t.signals
    )


class FeedbackIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    rating: Literal["up", "down"]
    comment: str = Field("", max_length=4000)
    step_id: str | None = Field(None, max_length=200)


def runs_router(clusterer: Clusterer | None) -> APIRouter:
    api = APIRouter(prefix="/v1/dashboard", tags=["dashboard"])

    @api.get("/me")
    async def me(v: Viewer = Depends(viewer)) -> Response:
        p = v.principal
        return json_response({"tenant_id": p.tenant_id, "key_id": p.key_id, "is_admin": p.is_admin})

    @api.get("/runs")
    async def list_runs(
        request: Request,
        v: Viewer = Depends(viewer),
        agent: str | None = None,
        status: TrajectoryStatus | None = None,
        harness_version: str | None = None,
        policy_version: str | None = None,
        cluster: str | None = None,
        started_after: datetime | None = None,
        started_before: datetime | None = None,
        signal: SignalKind | None = None,
        signal_min: float | None = None,
        signal_max: float | None = None,
        limit: int = Query(50, ge=1, le=200),
        cursor: str | None = None,
    ) -> Response:
        """A page of runs, newest first. Cluster and signal filters apply within the page (a page may
        hold fewer than `limit` rows; `next_cursor` continues the scan)."""
        rt = request.app.state.proxy
        await rt.flush()
        f = TrajectoryFilter(
            tenant_id=v.tenant_scope,
            agent=agent or None,
            status=status,
            harness_version=harness_version or None,
            policy_version=policy_version or None,
            started_after=started_after,
            started_before=started_before,
        )

        def load() -> tuple[list[dict[str, Any]], str | None]:
            page, next_cursor = rt.store.list_trajectories(f, limit, cursor)
            order = {h.id: i for i, h in enumerate(page)}
            full = sorted(rt.store.iter_trajectories(TrajectoryFilter(ids=list(order))), key=lambda t: order[t.id])
            kind = signal.value if signal else None
            rows = [run_row(t, clusterer) for t in full if _signal_matches(t, kind, signal_min, signal_max)]
            return [r for r in rows if cluster in (None, "", r["cluster"])], next_cursor

        try:
            rows, next_cursor = await asyncio.to_thread(load)
        except InvalidCursor:
            raise InvalidRequest("invalid cursor", code="invalid_cursor") from None
        return json_response({"data": rows, "next_cursor": next_cursor})

    @api.get("/runs/{trajectory_id}")
    async def get_run(trajectory_id: str, request: Request, v: Viewer = Depends(viewer)) -> Response:
        rt = request.app.state.proxy
        await rt.flush()
        t = await _visible_run(rt.store, trajectory_id, v)
        return json_response({"run": run_row(t, clusterer), "trajectory": t.model_dump(mode="json")})

    @api.post("/runs/{trajectory_id}/feedback", status_code=201)
    async def feedback(trajectory_id: str, body: FeedbackIn, request: Request, v: Viewer = Depends(viewer)) -> Response:
        """Thumbs up (1.0) or down (0.0) with a comment, on the run or one step: a `user_feedback` signal."""
        rt = request.app.state.proxy
        t = await _visible_run(rt.store, trajectory_id, v)
        if body.step_id is not None and body.step_id not in {s.id for s in t.steps}:
            raise ResourceNotFound(f"no step {body.step_id} in run {t.id}", code="step_not_found")
        signal: dict[str, Any] = {
            "id": new_id("sig"),
            "kind": SignalKind.user_feedback.value,
            "value": 1.0 if body.rating == "up" else 0.0,
            "step_id": body.step_id,
            "label": f"thumbs_{body.rating}",
            "source": "dashboard",
            "confidence": 1.0,
            "created_at": utcnow().isoformat(),
            "metadata": {"key_id": v.actor, "comment": body.comment},
        }
        await rt.spool_record(
            SignalRecord(
                id=signal["id"],
                trajectory_id=t.id,
                tenant_id=t.tenant_id,
                end_user=t.end_user,
                run_agent=t.agent,
                capture=t.capture,
                signal=signal,
            )
        )
        await rt.flush()
        return json_response({"signal_id": signal["id"], "trajectory_id": t.id}, 201)

    @api.get("/annotations")
    async def annotation_queue(
        request: Request, v: Viewer = Depends(viewer), limit: int = Query(50, ge=1, le=200)
    ) -> Response:
        """Runs a judge was unsure about (low confidence or a middling value) that no person rated yet."""
        rt = request.app.state.proxy
        await rt.flush()

        def load() -> list[dict[str, Any]]:
            judged = recent_signals(rt.store.engine, SignalKind.judge.value, v.tenant_scope)
            unsure = [j for j in judged if _unsure(j["signal"])]
            rated = trajectories_with_signal(
                rt.store.engine, SignalKind.user_feedback.value, [j["trajectory_id"] for j in unsure]
            )
            queue: dict[str, dict[str, Any]] = {}
            for j in unsure:
                if j["trajectory_id"] not in rated and j["trajectory_id"] not in queue:
                    s = j["signal"]
                    queue[j["trajectory_id"]] = {
                        "trajectory_id": j["trajectory_id"],
                        "agent": j["agent"],
                        "tenant_id": j["tenant_id"],
                        "value": s.get("value"),
                        "confidence": s.get("confidence", 1.0),
                        "label": s.get("label"),
                        "source": s.get("source"),
                        "step_id": s.get("step_id"),
                    }
            return list(queue.values())[:limit]

        return json_response({"data": await asyncio.to_thread(load)})

    return api


def _unsure(signal: dict[str, Any]) -> bool:
    value, confidence = signal.get("value"), signal.get("confidence", 1.0)
    middling = isinstance(value, int | float) and JUDGE_MIDDLING[0] <= value <= JUDGE_MIDDLING[1]
    return middling or (isinstance(confidence, int | float) and confidence < JUDGE_UNSURE_CONFIDENCE)


async def _visible_run(store: Store, trajectory_id: str, v: Viewer) -> Trajectory:
    try:
        return await asyncio.to_thread(store.get_trajectory, trajectory_id, v.tenant_scope)
    except NotFound:
        raise ResourceNotFound(f"run {trajectory_id} not found") from None
