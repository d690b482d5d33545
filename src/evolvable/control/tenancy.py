"""One control plane per tenant, one leader for all of them.

Control's view of an agent is (tenant, agent): each tenant gets its own `ControlPlane` (its runs,
versions, decisions and rollouts only), and they share one `LeaderLock`, so across replicas exactly
one process ticks every tenant. A tenant without configured agents gets a plane on first use
(reading its decisions, say), never a background loop of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from evolvable.control.leader import LeaderLock
from evolvable.control.registry import Registry
from evolvable.control.runtime import ControlPlane, TickReport

log = logging.getLogger(__name__)


@dataclass
class ControlPlanes:
    """Every tenant's control plane; `tick()` runs them all under the one leader lock."""

    make: Callable[[str], ControlPlane]
    """Builds the plane of a tenant (the composition root passes one that shares the leader lock)."""
    leader: LeaderLock
    planes: dict[str, ControlPlane] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def single(cls, plane: ControlPlane) -> ControlPlanes:
        """Wrap one plane (tests, embedded uses): other tenants get planes sharing its store and leader."""

        def make(tenant: str) -> ControlPlane:
            return ControlPlane(
                plane.store, config=plane.config, router=plane.router, leader=plane.leader, tenant=tenant
            )

        return cls(make=make, leader=plane.leader, planes={plane.tenant: plane})

    def plane(self, tenant: str) -> ControlPlane:
        with self._lock:
            found = self.planes.get(tenant)
            if found is None:
                found = self.planes[tenant] = self.make(tenant)
            return found

    def tenants(self) -> list[str]:
        with self._lock:
            return sorted(self.planes)

    def __iter__(self) -> Iterator[ControlPlane]:
        return iter([self.planes[t] for t in self.tenants()])

    def tick(self, tenant: str | None = None, agent: str | None = None) -> TickReport:
        """One cycle for every tenant (or one), as the leader; a non-leader changes nothing. Tenants whose
        agents were registered outside the configuration (`evolvable harness register`) are ticked too."""
        if not self.leader.acquire():
            return TickReport(leader=False)
        if tenant is None:
            for known in Registry(self.leader.engine, tenant=None).tenants():
                self.plane(known)
        report = TickReport(leader=True)
        with self.leader.kept():
            for plane in [self.plane(tenant)] if tenant else list(self):
                part = plane.tick(agent)
                prefix = "" if plane.tenant == "default" else f"[{plane.tenant}] "
                report.actions += [prefix + a for a in part.actions]
                report.decisions += part.decisions
        return report

    async def run_background(self, interval_s: float, stop: asyncio.Event | None = None) -> None:
        """Tick forever in a worker thread (the event loop keeps serving); for `evolvable serve`."""
        stop = stop or asyncio.Event()
        while not stop.is_set():
            started = time.monotonic()
            try:
                report = await asyncio.to_thread(self.tick)
                for action in report.actions:
                    log.info("control: %s", action)
            except Exception:  # keep the loop alive; the error is logged
                log.exception("control plane tick failed")
            wait = max(0.0, interval_s - (time.monotonic() - started))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=wait)
        await asyncio.to_thread(self.leader.release)
