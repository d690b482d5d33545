"""Build the control planes from the configuration: one per tenant, sharing one leader lock.

Per agent: the starting harness and policy (bootstrapped once, never over an evolved active version),
and the workload plugin that gives its gates replay tasks and safety probes.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from evolvable.app.config import AgentConfig, ConfigError, EvolvableConfig, WorkloadSection
from evolvable.app.endpoints import hot_load_targets, model_endpoint, upstream_url
from evolvable.control.adapters import AdapterSync
from evolvable.control.decision import DecisionConfig
from evolvable.control.gates import GateConfig, ReplaySuite
from evolvable.control.judge import judge_from_settings
from evolvable.control.leader import LeaderLock
from evolvable.control.model_endpoints import EvolverModel, JudgeModel
from evolvable.control.models import Lever, PolicySpec
from evolvable.control.rollout import CanaryConfig
from evolvable.control.runtime import ControlConfig, ControlPlane
from evolvable.control.task_clusters import ClustererStore, ClusteringConfig, TaskClusters
from evolvable.control.tenancy import ControlPlanes
from evolvable.control.workloads import Workload, WorkloadContext, WorkloadError, load_entry_point, load_object
from evolvable.protocol.harness import Harness, MemoryExemplar
from evolvable.proxy.config import ProxyConfig
from evolvable.store import Store

if TYPE_CHECKING:
    from evolvable.control.evolvers import Evolver
    from evolvable.control.evolvers.weights import WeightsEvolver
    from evolvable.control.jobs import Launcher
    from evolvable.control.judge import Judge
    from evolvable.control.router import HarnessRouter


def control_config(config: EvolvableConfig) -> ControlConfig:
    c = config.control
    levers = frozenset(c.levers)
    return ControlConfig(
        decision=DecisionConfig(
            levers=levers,
            approval_levers=frozenset(c.approval.levers),
            **c.decision.model_dump(),
        ),
        gates=GateConfig(**c.gates.model_dump()),
        canary=CanaryConfig(**c.canary.model_dump(exclude={"enabled"})),
        window=c.window,
        success_threshold=c.success_threshold,
        verdict_min_runs=c.verdict_min_runs,
        verdict_delta=c.verdict_delta,
        use_canary=c.canary.enabled,
        time_budget_s=c.time_budget_s,
    )


def weights_evolver(config: EvolvableConfig, store: Store | None, servers: tuple[str, ...]) -> WeightsEvolver:
    """The weights lever: background jobs through the configured launcher, gated snapshots, hot-loading."""
    from evolvable.control.evolvers.weights import WeightsEvolver
    from evolvable.control.jobs import CommandLauncher, JobManager, LocalLauncher
    from evolvable.control.snapshot_gate import SnapshotGateConfig
    from evolvable.store.jobs import TrainingJobs

    w = config.control.weights
    launch = w.launcher
    jobs = None
    if launch.kind != "inline" and store is not None:
        launcher: Launcher = (
            LocalLauncher(num_processes=launch.num_processes, tool=launch.tool)
            if launch.kind == "local"
            else CommandLauncher(launch.template or "", launch.num_processes, launch.cancel_template)
        )
        jobs = JobManager(TrainingJobs(store.engine), launcher, Path(w.output_dir) / "jobs", launch.max_attempts)
    return WeightsEvolver(
        servers=servers,
        output_root=w.output_dir,
        config_overrides=dict(w.overrides) or None,
        jobs=jobs,
        gate=SnapshotGateConfig(points=w.snapshot_points, **w.gate.model_dump()),
    )


def evolvers(
    config: EvolvableConfig, proxy: ProxyConfig, policy_endpoints: dict[str, str], store: Store | None = None
) -> dict[Lever, Evolver]:
    from evolvable.control.evolvers import default_evolvers
    from evolvable.control.evolvers.memory import MemoryEvolver

    c = config.control
    model = None
    if c.evolver is not None:
        url, key = model_endpoint(c.evolver, proxy, "control.evolver.api_key_env")
        model = EvolverModel(
            base_url=url,
            model=c.evolver.model,
            api_key=key,
            timeout_s=c.evolver.timeout_s,
            prefill=c.evolver.prefill,
            **({"max_tokens": c.evolver.max_tokens} if c.evolver.max_tokens else {}),
        )
    servers = hot_load_targets(config.policy_servers, policy_endpoints)
    out = default_evolvers(model, policy_servers=servers)
    out[Lever.memory] = MemoryEvolver(per_cluster=c.memory.per_cluster, explore_tasks=c.memory.explore_tasks)
    out[Lever.weights] = weights_evolver(config, store, servers)
    return out


def judge_model(config: EvolvableConfig, proxy: ProxyConfig) -> JudgeModel | None:
    j = config.control.judge
    if j is None:
        return None
    url, key = model_endpoint(j, proxy, "control.judge.api_key_env")
    rubrics = {a.name: a.rubric for a in config.agents if a.rubric}
    return JudgeModel(
        base_url=url,
        model=j.model,
        api_key=key,
        rubric=j.rubric,
        timeout_s=j.timeout_s,
        rubrics=rubrics or None,
        prefill=j.prefill,
        max_tokens=j.max_tokens,
    )


def load_workload(section: WorkloadSection) -> Workload:
    """The agent's workload plugin: an entry point, a `module:object`, or a webhook service."""
    if section.entry_point is not None:
        return load_entry_point(section.entry_point)
    if section.object is not None:
        return load_object(section.object)
    try:
        from evolvable.control.webhook import WebhookWorkload
    except ImportError as err:
        raise WorkloadError(f"webhook workloads are not available in this installation: {err}") from None
    if section.webhook is None:  # (unreachable: the section's validator wants exactly one of the three)
        raise WorkloadError("the workload names no entry point, object or webhook")
    workload: Workload = WebhookWorkload(section.webhook, timeout_s=section.timeout_s, options=section.options)
    return workload


def starting_harness(agent: AgentConfig) -> Harness:
    if agent.harness is None:
        return Harness(agent=agent.name)
    try:
        text = agent.harness.read_text()
        data = yaml.safe_load(text)  # JSON is YAML
        harness = Harness.model_validate({"agent": agent.name, **(data or {})})
    except (OSError, yaml.YAMLError, ValueError, TypeError) as err:
        raise ConfigError(f"agents.{agent.name}.harness: cannot read {agent.harness}: {err}") from None
    if harness.agent != agent.name:
        raise ConfigError(f"agents.{agent.name}.harness: the file is for agent {harness.agent!r}")
    return harness


def replay_suite(
    agent: AgentConfig,
    proxy: ProxyConfig,
    sanitize: Callable[[MemoryExemplar], MemoryExemplar] | None,
    *,
    store: Store | None = None,
    judge: Judge | None = None,
    clusterer: Callable[[], Any] | None = None,
) -> ReplaySuite | None:
    """The agent's workload plugin; without one, replay from its recorded traffic judged by the judge model
    (single-turn counterfactuals, docs/control_plane.md); neither: no replay gate for this agent."""
    if agent.workload is None and (judge is None or store is None):
        return None
    upstream = agent.replay_upstream or (agent.policy.upstream if agent.policy else None)
    endpoint, api_key = upstream_url(proxy, upstream)
    context = WorkloadContext(
        endpoint=endpoint,
        model=agent.policy.base_model if agent.policy else agent.name,
        api_key=api_key,
        sanitize=sanitize,
        options=dict(agent.workload.options) if agent.workload is not None else agent.recorded_replay.model_dump(),
    )
    if agent.workload is None:
        from evolvable.control.recorded_replay import RecordedTrafficWorkload

        assert store is not None and judge is not None  # (without both, the guard above returned)

        recorded = RecordedTrafficWorkload(
            store,
            agent.tenant,
            agent.name,
            judge=judge,
            per_cluster=agent.recorded_replay.per_cluster,
            clusterer=clusterer,
        )
        return recorded.suite(context)
    try:
        return load_workload(agent.workload).suite(context)
    except WorkloadError:
        raise
    except Exception as err:
        raise WorkloadError(f"workload {agent.workload.reference} of agent {agent.name!r} failed: {err}") from err


def build_planes(
    config: EvolvableConfig,
    store: Store,
    proxy: ProxyConfig,
    *,
    router: HarnessRouter | None = None,
    policy_endpoints: dict[str, str] | None = None,
    sanitize: Callable[[MemoryExemplar], MemoryExemplar] | None = None,
) -> ControlPlanes:
    """Every tenant's plane, with its agents bootstrapped and their replay suites registered."""
    leader = LeaderLock(store.engine, lease_s=config.control.leader_lease_s)
    settings = control_config(config)
    levers = evolvers(config, proxy, policy_endpoints or {}, store)
    judge = judge_model(config, proxy)
    judge_runner = judge_from_settings(asdict(judge)) if judge is not None else None
    clusterers = ClustererStore(store.engine)
    clustering = ClusteringConfig(**config.control.clustering.model_dump())
    servers = hot_load_targets(config.policy_servers, policy_endpoints or {})
    adapters = AdapterSync(servers) if servers else None

    def make(tenant: str) -> ControlPlane:
        return ControlPlane(
            store,
            config=settings,
            evolvers=levers,
            router=router,
            leader=leader,
            tenant=tenant,
            judge_model=judge,
            judge=judge_runner,
            clusters=TaskClusters(clusterers, tenant, clustering),
            adapters=adapters,
        )

    planes = ControlPlanes(make=make, leader=leader)
    for agent in config.agents:
        plane = planes.plane(agent.tenant)
        policy = (
            PolicySpec(base_model=agent.policy.base_model, upstream=agent.policy.upstream) if agent.policy else None
        )
        plane.bootstrap(starting_harness(agent), policy)
        suite = replay_suite(
            agent,
            proxy,
            sanitize,
            store=store,
            judge=judge_runner,
            clusterer=functools.partial(plane.clusterer_of, agent.name),
        )
        if suite is not None:
            plane.register_suite(agent.name, suite)
    return planes
