"""The dashboard: `/ui/` (static pages) over an authenticated, tenant-scoped JSON API (`/v1/dashboard/...`).

    install_dashboard(app, plane=planes)    # after create_app; None without a control plane

The pages hold no data of their own: they call the same JSON API any client can, with the key the
person logged in with, so they never show what that key may not read.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from fastapi.staticfiles import StaticFiles

if TYPE_CHECKING:
    from fastapi import FastAPI

    from evolvable.control.runtime import ControlPlane
    from evolvable.control.tenancy import ControlPlanes

STATIC_DIR = Path(__file__).parent / "static"


def install_dashboard(app: FastAPI, *, plane: ControlPlanes | ControlPlane | None = None) -> None:
    """Mount `/ui/` and the dashboard API on a proxy app; with a control plane, also its pages and metrics."""
    from evolvable.dashboard.runs import runs_router

    app.include_router(runs_router(getattr(plane, "clusterer", None)))
    if plane is None:
        from evolvable.dashboard.evolution import without_control_router

        app.include_router(without_control_router())
    else:
        from evolvable.control.journal import Journal
        from evolvable.control.metrics import ControlCollector
        from evolvable.control.tenancy import ControlPlanes
        from evolvable.dashboard.evolution import evolution_router

        planes = plane if isinstance(plane, ControlPlanes) else ControlPlanes.single(plane)
        app.include_router(evolution_router(planes))
        from evolvable.telemetry.metrics import TRAINER_REGISTRY

        # A weights job trained inline in this process shows its loss, KL and throughput here too.
        journal = Journal(planes.leader.engine, tenant=None)
        collectors = [ControlCollector(journal), TRAINER_REGISTRY]
        app.state.metrics_collectors = [*getattr(app.state, "metrics_collectors", ()), *collectors]
    app.mount("/ui", StaticFiles(directory=STATIC_DIR, html=True), name="ui")


__all__ = ["STATIC_DIR", "install_dashboard"]
