"""Clusters from traffic: fitted once enough runs lack a reported cluster, stored as versions, refitted on drift,
served to statistics and to the harness router's memory retrieval. On SQLite and PostgreSQL."""

from __future__ import annotations

from evolvable.control.router import HarnessRouter
from evolvable.control.runtime import ControlConfig, ControlPlane
from evolvable.control.task_clusters import ClustererStore, ClusteringConfig, TaskClusters
from evolvable.protocol.harness import ChatMessage, MemoryExemplar
from evolvable.proxy.hooks import SessionContext

from .conftest import AGENT, base_harness, make_trajectory

FLIGHTS = "find a flight from {} to Lisbon on friday morning"
HOTELS = "book a hotel room in {} for three nights with breakfast"
VISAS = "which visa documents does a citizen of {} need for japan"
CITIES = ["Oslo", "Rome", "Paris", "Madrid", "Vienna", "Prague", "Dublin", "Athens", "Berlin", "Warsaw"]


def _record(store, template: str, n: int, *, harness_version: str, offset: int = 0) -> None:
    for i in range(n):
        t = make_trajectory(
            cluster="",
            success=i % 2 == 0,
            harness_version=harness_version,
            task_text=template.format(CITIES[(i + offset) % 10]),
        )
        t.metadata.pop("cluster", None)
        t.task_input = template.format(CITIES[(i + offset) % 10])
        store.put_trajectory(t)


def test_fit_store_refit_and_serve(store) -> None:
    clusters = TaskClusters(ClustererStore(store.engine), "default", ClusteringConfig(min_runs=12, drift_threshold=0.3))
    plane = ControlPlane(store, config=ControlConfig(), clusters=clusters)
    active, _ = plane.bootstrap(base_harness())
    _record(store, FLIGHTS, 8, harness_version=active.id)
    _record(store, HOTELS, 8, harness_version=active.id)
    report = plane.tick(AGENT)
    fitted = clusters.for_agent(AGENT)
    assert fitted is not None and fitted.version == 1
    assert any("task clusterer v1" in a for a in report.actions)
    runs = plane.runs(AGENT)
    flights = {r.cluster for r in runs if "flight" in r.task_text}
    hotels = {r.cluster for r in runs if "hotel" in r.task_text}
    assert len(flights) == 1 and len(hotels) == 1 and flights != hotels  # two kinds of task, two clusters

    plane.tick(AGENT)  # nothing new: no refit
    assert clusters.for_agent(AGENT).version == 1

    _record(store, VISAS, 10, harness_version=active.id)  # a new kind of task the clusterer never saw
    report = plane.tick(AGENT)
    refitted = clusters.for_agent(AGENT)
    assert refitted.version == 2 and any("drift" in a for a in report.actions)
    runs = plane.runs(AGENT)
    assert len({r.cluster for r in runs}) >= 3
    # Another tenant's agent of the same name has no clusterer: clusters never cross tenants.
    assert TaskClusters(clusters.store, "globex").for_agent(AGENT) is None

    # The harness router retrieves memory by the learned cluster of the request's text.
    visa_cluster = next(r.cluster for r in runs if "visa" in r.task_text)
    hotel_cluster = next(r.cluster for r in runs if "hotel" in r.task_text)
    exemplars = [
        MemoryExemplar(
            id=f"ex-{c}", cluster=c, task_input=f"{c} task", messages=[ChatMessage(role="user", content=f"{c} example")]
        )
        for c in (visa_cluster, hotel_cluster)
    ]
    harness = base_harness().model_copy(update={"memory": exemplars, "memory_k": 1})
    router = HarnessRouter(store.engine, refresh_interval_s=3600)
    router.refresh()
    ctx = SessionContext(tenant_id="default", agent=AGENT, trajectory_id="t", session_id=None, endpoint="chat")
    body = {"model": "m", "messages": [{"role": "user", "content": VISAS.format("Chile")}]}
    rendered = router.apply_harness(harness, body, ctx)
    assert any(m.get("content") == f"{visa_cluster} example" for m in rendered["messages"])
    assert not any(m.get("content") == f"{hotel_cluster} example" for m in rendered["messages"])


class _OwnLabelRunner:
    """A workload runner that labels every outcome with its own cluster name, which live traffic never uses."""

    def run(self, harness, policy, tasks):
        from evolvable.control.gates import TaskOutcome

        return [
            TaskOutcome(t.id, "workload-label", success=bool(harness.memory) or i % 4 == 0) for i, t in enumerate(tasks)
        ]


def test_gates_and_recorded_replay_split_by_the_fitted_clusters(store) -> None:
    from evolvable.control.gates import ReplaySuite
    from evolvable.control.judge import Judge
    from evolvable.control.models import Lever
    from evolvable.control.recorded_replay import RecordedTrafficWorkload

    from .conftest import ScriptedTask
    from .test_runtime import config

    clusters = TaskClusters(ClustererStore(store.engine), "default", ClusteringConfig(min_runs=12))
    plane = ControlPlane(store, config=config(levers=frozenset({Lever.memory})), clusters=clusters)
    active, _ = plane.bootstrap(base_harness())
    _record(store, FLIGHTS, 10, harness_version=active.id)
    _record(store, HOTELS, 10, harness_version=active.id)
    holdout = [ScriptedTask(f"h-{i}", "own", t.format(CITIES[i % 10])) for i, t in enumerate([FLIGHTS, HOTELS] * 8)]
    plane.register_suite(AGENT, ReplaySuite(_OwnLabelRunner(), holdout))
    report = plane.tick(AGENT)
    fitted = clusters.for_agent(AGENT)
    assert fitted is not None
    learned = {fitted.predict(FLIGHTS.format("Oslo")), fitted.predict(HOTELS.format("Oslo"))}
    assert len(learned) == 2
    decision = plane.journal.decision(report.decisions[0])
    # The gate's split is by the clusters statistics and decisions use, not the workload's own label.
    assert set(decision.gates["replay"]["per_cluster"]) == learned
    assert set(decision.evidence["before"]) == learned

    recorded = RecordedTrafficWorkload(
        store, "default", AGENT, judge=Judge("http://127.0.0.1:9/v1", "j"), clusterer=lambda: plane.clusterer_of(AGENT)
    )
    assert set(recorded.recorded_tasks()) == learned
    unclustered = RecordedTrafficWorkload(store, "default", AGENT, judge=Judge("http://127.0.0.1:9/v1", "j"))
    assert set(unclustered.recorded_tasks()) == {"all"}
