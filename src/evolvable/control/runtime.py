"""The control plane's runtime: one `tick()` runs a whole cycle for every registered agent.

    canary analyses -> promote / roll back / extend / pause
    verdicts for decisions whose effect can now be measured
    statistics -> lever decision -> evolver -> safety gate -> replay gate -> (approval) -> canary

It runs inside `evolvable serve` as a background task (`run_background`), with one leader across
replicas (`LeaderLock`), and `evolvable demo` drives it step by step by calling `tick()` between
batches of live episodes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from evolvable.control.deadline import Step, StepTimedOut
from evolvable.control.decision import DecisionConfig, DecisionContext, Proposal, decide
from evolvable.control.evolvers import (
    EvolveContext,
    Evolver,
    HarnessCandidate,
    LeverPending,
    LeverUnavailable,
    PolicyCandidate,
    default_evolvers,
)
from evolvable.control.exploration import explorer_of
from evolvable.control.gates import GateConfig, Gates, ReplayFailed, ReplaySuite
from evolvable.control.journal import Journal
from evolvable.control.judge import Judge, judge_agreement
from evolvable.control.leader import LeaderLock
from evolvable.control.lever_choice import calibration
from evolvable.control.models import (
    AnalysisResult,
    Decision,
    DecisionState,
    Lever,
    PolicySpec,
    Rollout,
    RolloutState,
    Verdict,
    VersionKind,
    VersionRecord,
    VersionState,
)
from evolvable.control.multi_agent import load_sub_agent_runs
from evolvable.control.registry import DEFAULT_TENANT, Registry, now
from evolvable.control.rollout import CanaryConfig, analyze_canary
from evolvable.control.statistics import Clusterer, RunSummary, compute_statistics, load_runs
from evolvable.control.stats_math import wilson_interval, worse_pvalue
from evolvable.control.task_clusters import TaskClusters
from evolvable.errors import ControlError
from evolvable.protocol.harness import Harness
from evolvable.store import Store

if TYPE_CHECKING:
    from evolvable.control.adapters import AdapterSync
    from evolvable.control.evolvers.reflective import EvolverModel
    from evolvable.control.model_endpoints import JudgeModel
    from evolvable.control.router import HarnessRouter

log = logging.getLogger(__name__)


@dataclass
class ControlConfig:
    decision: DecisionConfig = field(default_factory=DecisionConfig)
    gates: GateConfig = field(default_factory=GateConfig)
    canary: CanaryConfig = field(default_factory=CanaryConfig)
    window: int = 300
    """Newest finished runs per agent the statistics read."""
    success_threshold: float = 0.5
    verdict_min_runs: int = 12
    """Runs under a promoted version before its decision gets a verdict."""
    verdict_delta: float = 0.1
    """A cluster's success must move by this much to count as improved or harmed."""
    use_canary: bool = True
    """False promotes straight after the gates (e.g. offline benchmarks with no live traffic split)."""
    time_budget_s: float | None = None
    """Longest a decision's evolver and gates may take together. Each runs in a worker thread with the
    remaining budget as its deadline: past it the tick stops waiting, the decision is recorded as timed out
    (state failed, `gates.budget`), the step is abandoned (cancel event set, result discarded) and its
    candidate never reaches live traffic. Until an abandoned step ends, its agent gets no new decision."""


@dataclass
class TickReport:
    leader: bool
    actions: list[str] = field(default_factory=list)
    decisions: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        if not self.leader:
            return "not the leader: another control plane acts"
        return "\n".join(self.actions) or "nothing to do"


@dataclass(frozen=True)
class _Candidate:
    """A registered candidate version and the baseline its gates compare it with."""

    record: VersionRecord
    kind: VersionKind
    harness: Harness
    base_harness: Harness
    policy: PolicySpec | None
    base_policy: PolicySpec | None


class ControlPlane:
    def __init__(
        self,
        store: Store,
        *,
        config: ControlConfig | None = None,
        evolvers: dict[Lever, Evolver] | None = None,
        evolver_model: EvolverModel | None = None,
        trainer: Any = None,
        clusterer: Clusterer | None = None,
        router: HarnessRouter | None = None,
        leader: LeaderLock | None = None,
        tenant: str = DEFAULT_TENANT,
        judge_model: JudgeModel | None = None,
        clusters: TaskClusters | None = None,
        judge: Judge | None = None,
        adapters: AdapterSync | None = None,
    ) -> None:
        self.store = store
        self.tenant = tenant
        """Control's view of an agent is (tenant, agent): runs, versions, decisions and rollouts of this tenant only."""
        self.config = config or ControlConfig()
        self.registry = Registry(store.engine, tenant)
        self.journal = Journal(store.engine, tenant)
        self.judge_model = judge_model
        """Settings of the judge model (base_url, model, api_key, rubric) for judge-based signals, when configured."""
        self.gates = Gates(self.config.gates)
        self.evolvers = evolvers or default_evolvers(evolver_model, trainer)
        self.clusterer = clusterer
        self.clusters = clusters
        """Per-agent clusterers fitted from this tenant's traffic (stored, refitted on drift); wins over `clusterer`."""
        self.router = router
        self.leader = leader or LeaderLock(store.engine)
        self.suites: dict[str, ReplaySuite] = {}
        self.judge = judge
        self.sub_agents: dict[str, str] = {}
        """sub-agent -> the orchestrator whose sessions hold its calls (`register_sub_agent`)."""
        """Scores ended runs that carry no outcome (judge signals), before the statistics read them."""
        self.adapters = adapters
        """Keeps the policy servers' loaded adapters in step with the registry after every change."""
        self._tick_lock = threading.Lock()
        self._abandoned: dict[str, Step[Any]] = {}
        """agent -> its evolver or gate step abandoned at the time budget, while it is still running."""

    # ------------------------------------------------------------------ setup

    def register_suite(self, agent: str, suite: ReplaySuite) -> None:
        """Held-out tasks, safety probes and a runner for an agent's replay and safety gates."""
        self.suites[agent] = suite

    def register_sub_agent(self, agent: str, orchestrator: str) -> None:
        """`agent` makes calls inside `orchestrator`'s sessions; its statistics come from those runs."""
        self.sub_agents[agent] = orchestrator

    def bootstrap(
        self, harness: Harness, policy: PolicySpec | None = None
    ) -> tuple[VersionRecord, VersionRecord | None]:
        """Register an agent's starting harness (and policy) as active, unless it already has active ones."""
        h = self.registry.current(harness.agent, VersionKind.harness, VersionState.active)
        if h is None:
            h = self.registry.register_harness(harness, state=VersionState.active, note="bootstrap")
        p = self.registry.current(harness.agent, VersionKind.policy, VersionState.active)
        if p is None and policy is not None:
            p = self.registry.register_policy(harness.agent, policy, state=VersionState.active, note="bootstrap")
        self._refresh_router()
        return h, p

    # ------------------------------------------------------------------ the cycle

    def tick(self, agent: str | None = None) -> TickReport:
        """One full cycle; does nothing unless this instance holds the leader lock."""
        with self._tick_lock:
            if not self.leader.acquire():
                return TickReport(leader=False)
            report = TickReport(leader=True)
            self._abandon_interrupted(report)
            agents = [agent] if agent else self.registry.agents()
            for name in agents:
                try:
                    self._tick_agent(name, report)
                except Exception as err:  # one agent's failure must not stop the others
                    log.exception("control tick failed for %s", name)
                    report.actions.append(f"{name}: tick failed: {type(err).__name__}: {err}")
            self._refresh_router()
            report.actions += self._sync_adapters()
            return report

    def _abandon_interrupted(self, report: TickReport) -> None:
        """A decision still `proposed` when a tick starts was cut off half-way (its leader died between
        recording it and finishing it): nothing of it is served, so it is closed as failed, saying why.
        Its candidate version stays a candidate, which the next decision may pick up again."""
        for decision in self.journal.decisions(states=[DecisionState.proposed]):
            self.journal.update_decision(
                decision.id,
                state=DecisionState.failed,
                gates={
                    **decision.gates,
                    "interrupted": f"abandoned by leader {self.leader.holder}: the decision was cut off "
                    f"before its gates finished (leader was {decision.evidence.get('leader', 'unknown')})",
                },
            )
            if decision.candidate_version and decision.rollout_id is None:
                with contextlib.suppress(ControlError):  # cut off between starting its canary and its rollout
                    if self.registry.get(decision.candidate_version).state == VersionState.canary:
                        self.registry.transition(
                            decision.candidate_version,
                            VersionState.candidate,
                            reason=f"decision {decision.id} was interrupted",
                            actor="control-plane",
                        )
            report.actions.append(f"{decision.agent}: abandoned interrupted decision {decision.id}")

    async def run_background(self, interval_s: float = 30.0, stop: asyncio.Event | None = None) -> None:
        """Tick forever (in a worker thread, so the event loop keeps serving); for `evolvable serve`."""
        stop = stop or asyncio.Event()
        while not stop.is_set():
            try:
                await asyncio.to_thread(self.tick)
            except Exception:  # keep the loop alive; the error is logged
                log.exception("control plane tick failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=interval_s)
        await asyncio.to_thread(self.leader.release)

    def clusterer_of(self, agent: str) -> Any:
        """The agent's task clusterer: the one fitted from this tenant's traffic, else the configured one."""
        fitted = self.clusters.for_agent(agent) if self.clusters is not None else None
        return fitted or self.clusterer

    def runs(self, agent: str) -> list[RunSummary]:
        clusterer = self.clusterer_of(agent)
        if agent in self.sub_agents or agent in self.sub_agents.values():  # each agent sees its own side
            return load_sub_agent_runs(
                self.store,
                self.sub_agents.get(agent, agent),
                agent,
                limit=self.config.window,
                clusterer=clusterer,
                success_threshold=self.config.success_threshold,
            )
        return load_runs(
            self.store,
            agent,
            limit=self.config.window,
            clusterer=clusterer,
            success_threshold=self.config.success_threshold,
            tenant_id=self.tenant,
        )

    def _tick_agent(self, agent: str, report: TickReport) -> None:
        active = self.registry.current(agent, VersionKind.harness, VersionState.active)
        if active is None:
            return
        if self.judge is not None:
            self._judge_sessions(agent, report)
        runs = self.runs(agent)
        if self.clusters is not None:
            _, refitted = self.clusters.update(agent, runs)
            if refitted:
                report.actions.append(refitted)
                runs = self.runs(agent)
        for rollout in self.journal.rollouts(agent, [RolloutState.running]):
            self._advance_rollout(rollout, runs, report)
        for decision in self.journal.decisions(agent, [DecisionState.promoted, DecisionState.applied]):
            if decision.verdict is None:
                self._judge(decision, runs, report)
        if self.journal.rollouts(agent, [RolloutState.running, RolloutState.paused]) or self.journal.decisions(
            agent, [DecisionState.awaiting_approval]
        ):
            return
        if self._winding_down(agent, report):
            return
        active = self.registry.current(agent, VersionKind.harness, VersionState.active)
        assert active is not None
        policy = self.registry.current(agent, VersionKind.policy, VersionState.active)
        weight_update_at = policy.updated_at if policy and policy.parent_id else None
        current_runs = [r for r in runs if r.harness_version == active.id]
        stats = compute_statistics(agent, current_runs, weight_update_at=weight_update_at)
        everything = compute_statistics(agent, runs, weight_update_at=weight_update_at)
        stats.by_harness_version = everything.by_harness_version
        stats.successful_runs = everything.successful_runs
        stats.since_weight_update = everything.since_weight_update
        parent = None
        if active.parent_id:
            try:
                prev = self.registry.get(active.parent_id)
                parent = prev.id if prev.state == VersionState.retired else None
            except ControlError:
                parent = None
        ctx = DecisionContext(
            stats=stats,
            active_harness=active.harness(),
            active_version=active.id,
            parent_version=parent,
            recent=self.journal.decisions(agent, limit=20),
            history=self.journal.decisions(agent, limit=200),
            runs=runs,
            can_explore=explorer_of(self.suites.get(agent)) is not None,
        )
        proposal, trace = decide(ctx, self.config.decision)
        if proposal is None:
            blocked = [t for t in trace if not t.endswith("evidence does not hold")]
            why = "; ".join(blocked) if blocked else "no rule's evidence holds"
            report.actions.append(f"{agent}: no change ({why})")
            return
        self._act(agent, proposal, ctx, active, policy, runs, report)

    def _judge_sessions(self, agent: str, report: TickReport) -> None:
        assert self.judge is not None
        try:
            judged = self.judge.judge_pending(self.store, agent, window=self.config.window)
        except Exception as err:  # a judge outage delays learning; it must not stop the cycle
            log.exception("judge failed for %s", agent)
            report.actions.append(f"{agent}: judge failed: {type(err).__name__}: {err}")
            return
        if judged.judged or judged.skipped:
            report.actions.append(
                f"{agent}: judge scored {judged.judged} run(s)"
                + (f", could not score {len(judged.skipped)}: {judged.skipped[0]}" if judged.skipped else "")
            )

    # ------------------------------------------------------------------ acting on a proposal

    def _act(
        self,
        agent: str,
        proposal: Proposal,
        ctx: DecisionContext,
        active: VersionRecord,
        policy: VersionRecord | None,
        runs: list[RunSummary],
        report: TickReport,
    ) -> None:
        """Journal the decision, then carry it as far as it goes: evolve a candidate, register it, gate it,
        and start its canary (or wait for approval). Every stop is recorded on the decision."""
        started = time.monotonic()
        decision = self._open_decision(agent, proposal, ctx, active, report)
        say = f"{agent}: {proposal.lever.value} ({proposal.rule})"
        if proposal.lever == Lever.rollback:
            target = proposal.target["restore"]
            self.registry.restore(target, reason=f"decision {decision.id}: {proposal.rationale}", actor="control-plane")
            self.journal.update_decision(
                decision.id, state=DecisionState.applied, candidate_kind=VersionKind.harness, candidate_version=target
            )
            report.actions.append(f"{say}: restored {target}")
            return
        ectx = EvolveContext(
            agent, self.store, active.harness(), active.id, runs, ctx.stats, policy, suite=self.suites.get(agent)
        )
        proposed = self._propose(agent, ectx, proposal, decision.id, started, report, say)
        if proposed is None:
            return
        candidate = self._register(agent, proposed, decision.id, active, policy, report, say)
        if candidate is None:
            return
        decision = self.journal.update_decision(
            decision.id,
            candidate_kind=candidate.kind,
            candidate_version=candidate.record.id,
            baseline_version=active.id if candidate.kind == VersionKind.harness else (policy.id if policy else None),
        )
        gates = self._gate(agent, candidate, decision.id, started, report, say)
        if gates is None:
            return
        self.journal.update_decision(decision.id, gates=gates)
        if decision.requires_approval:
            self.journal.update_decision(decision.id, state=DecisionState.awaiting_approval)
            report.actions.append(f"{say}: candidate {candidate.record.id} passed the gates; awaiting approval")
            return
        self._start(self.journal.decision(decision.id), report)

    def _open_decision(
        self, agent: str, proposal: Proposal, ctx: DecisionContext, active: VersionRecord, report: TickReport
    ) -> Decision:
        """Journal the proposal with the evidence it rests on, before anything acts on it."""
        stats = ctx.stats
        evidence = {
            "leader": self.leader.holder,
            "rule": proposal.rule,
            **proposal.evidence,
            "before": {c: [g.successes, g.n] for c, g in stats.clusters.items()},
            "statistics": stats.to_dict(),
        }
        decision = self.journal.record_decision(
            agent,
            proposal.lever,
            rationale=proposal.rationale,
            evidence=evidence,
            predicted={
                "improve": proposal.improve,
                "at_risk": proposal.at_risk,
                "target": proposal.target,
                **proposal.expected,
            },
            baseline_version=active.id,
            requires_approval=proposal.lever in self.config.decision.approval_levers,
        )
        report.decisions.append(decision.id)
        return decision

    def _propose(
        self,
        agent: str,
        ectx: EvolveContext,
        proposal: Proposal,
        decision_id: str,
        started: float,
        report: TickReport,
        say: str,
    ) -> HarnessCandidate | PolicyCandidate | None:
        """The lever's evolver's candidate; None (recorded) when the lever is unavailable or the evolver fails."""
        evolver = self.evolvers.get(proposal.lever)
        try:
            if evolver is None:
                raise LeverUnavailable(f"{proposal.lever.value} lever unavailable: no evolver configured")
            step = Step(lambda: evolver.propose(ectx, proposal), f"{proposal.lever.value} evolver", ectx.cancel)
            return step.result(self._remaining(started))
        except StepTimedOut:
            self._timed_out(agent, step, decision_id, started, report, say)
        except LeverUnavailable as err:
            why: dict[str, Any] = {"evolver": str(err)}
            if isinstance(err, LeverPending):
                why["pending"] = True  # a background job: the next tick continues it (no cooldown)
            self.journal.update_decision(decision_id, state=DecisionState.unavailable, gates=why)
            report.actions.append(f"{say}: {err}")
        except Exception as err:  # recorded, never silently dropped
            log.exception("evolver %s failed", proposal.lever.value)
            self.journal.update_decision(
                decision_id, state=DecisionState.failed, gates={"evolver": f"{type(err).__name__}: {err}"}
            )
            report.actions.append(f"{say}: evolver failed: {err}")
        return None

    def _register(
        self,
        agent: str,
        proposed: HarnessCandidate | PolicyCandidate,
        decision_id: str,
        active: VersionRecord,
        policy: VersionRecord | None,
        report: TickReport,
        say: str,
    ) -> _Candidate | None:
        """Register the proposed version as a candidate, paired with the baseline it is gated against;
        None (recorded) when it changes nothing or equals a version that exists."""
        base_harness = active.harness()
        base_policy = policy.policy() if policy else None
        if isinstance(proposed, HarnessCandidate):
            if self.registry.version_id(proposed.harness) == active.id:
                self.journal.update_decision(decision_id, state=DecisionState.failed, gates={"evolver": "no change"})
                report.actions.append(f"{say}: evolver produced no change")
                return None
            record = self.registry.register_harness(
                proposed.harness,
                parent=active.id,
                note=proposed.note,
                created_by=decision_id,
                lineage={"decision": decision_id, "changes": proposed.changes},
            )
            candidate = _Candidate(
                record, VersionKind.harness, proposed.harness, base_harness, base_policy, base_policy
            )
        else:
            record = self.registry.register_policy(
                agent,
                proposed.spec,
                parent=policy.id if policy else None,
                note=proposed.note,
                created_by=decision_id,
                data_snapshot=proposed.data_snapshot,
                config=proposed.config,
                metrics=proposed.metrics,
            )
            candidate = _Candidate(record, VersionKind.policy, base_harness, base_harness, proposed.spec, base_policy)
        if record.state != VersionState.candidate:
            self.journal.update_decision(
                decision_id,
                state=DecisionState.failed,
                candidate_kind=candidate.kind,
                candidate_version=record.id,
                gates={"evolver": f"candidate equals existing {record.state.value} version {record.id}"},
            )
            report.actions.append(f"{say}: candidate {record.id} already exists ({record.state.value})")
            return None
        return candidate

    def _gate(
        self, agent: str, candidate: _Candidate, decision_id: str, started: float, report: TickReport, say: str
    ) -> dict[str, Any] | None:
        """The gates' results when the candidate passed them all; None (recorded, candidate rejected or
        stopped) when one failed, broke or ran past the budget."""
        record = candidate.record
        gate_step = Step(
            lambda: self._run_gates(
                agent, candidate.harness, candidate.base_harness, candidate.policy, candidate.base_policy
            ),
            f"gates of {record.id}",
        )
        try:
            gates = gate_step.result(self._remaining(started))
        except StepTimedOut:
            self._timed_out(agent, gate_step, decision_id, started, report, say)
            return None
        except ReplayFailed as err:
            self._stop_on_broken_replay(decision_id, record.id, str(err))
            report.actions.append(f"{say}: candidate {record.id} stopped: {err}")
            return None
        except Exception as err:  # recorded; the candidate stays a candidate and is never served
            log.exception("gates failed for %s", record.id)
            self.journal.update_decision(
                decision_id, state=DecisionState.failed, gates={"error": f"{type(err).__name__}: {err}"}
            )
            report.actions.append(f"{say}: gates failed: {err}")
            return None
        failed = next((g for g in gates.values() if isinstance(g, dict) and g.get("passed") is False), None)
        if failed is None:
            return gates
        self.registry.reject(record.id, reason=f"{failed['name']} gate: {failed['reason']}")
        verdict = Verdict.harmful if failed["name"] == "safety" else Verdict.ineffective
        if failed["name"] == "replay" and (failed.get("candidate_rate") or 0) < (failed.get("baseline_rate") or 0):
            verdict = Verdict.harmful
        self.journal.update_decision(
            decision_id,
            state=DecisionState.gated_out,
            gates=gates,
            verdict=verdict,
            verdict_detail={
                "measured_on": "replay",
                "measured_effect": round((failed.get("candidate_rate") or 0) - (failed.get("baseline_rate") or 0), 4),
                **{k: v for k, v in failed.items() if k != "name"},
            },
        )
        report.actions.append(f"{say}: candidate {record.id} stopped by the {failed['name']} gate: {failed['reason']}")
        return None

    def _remaining(self, started: float) -> float | None:
        budget = self.config.time_budget_s
        return None if budget is None else budget - (time.monotonic() - started)

    def _timed_out(
        self, agent: str, step: Step[Any], decision_id: str, started: float, report: TickReport, say: str
    ) -> None:
        """The step ran past the budget: record it and stop waiting; nothing it produces is applied."""
        self._abandoned[agent] = step
        note = (
            f"timed out: the {step.name} was still running when the time budget of "
            f"{self.config.time_budget_s:g} s ran out ({time.monotonic() - started:.1f} s); "
            "it was stopped and nothing was applied"
        )
        self.journal.update_decision(decision_id, state=DecisionState.failed, gates={"budget": note})
        report.actions.append(f"{say}: {note}")

    def _winding_down(self, agent: str, report: TickReport) -> bool:
        """An abandoned step of this agent still running: no new decision until it ends (steps never pile up)."""
        step = self._abandoned.get(agent)
        if step is None:
            return False
        if not step.running:
            del self._abandoned[agent]
            return False
        report.actions.append(f"{agent}: no change (the timed-out {step.name} is still winding down)")
        return True

    def _stop_on_broken_replay(self, decision_id: str, version: str, reason: str) -> None:
        """Reject the candidate and record why; no verdict, since a broken replay says nothing about it."""
        self.registry.reject(version, reason=f"replay failed: {reason}")
        self.journal.update_decision(
            decision_id,
            state=DecisionState.gated_out,
            gates={"replay": {"name": "replay", "passed": False, "reason": f"replay failed: {reason}"}},
        )

    def _run_gates(
        self,
        agent: str,
        cand_harness: Harness,
        base_harness: Harness,
        cand_policy: PolicySpec | None,
        base_policy: PolicySpec | None,
    ) -> dict[str, Any]:
        suite = self.suites.get(agent)
        if suite is None:
            return {"note": "no replay suite registered for this agent: the canary analysis decides"}
        # All four evaluations at once: their requests share the serving engine's batches, which cuts the
        # time to a verdict. Safety still decides first; a candidate it blocks wasted its holdout run.
        self.gates.prefetch(
            suite,
            [
                ("safety", cand_harness, cand_policy),
                ("safety", base_harness, base_policy),
                ("holdout", base_harness, base_policy),
                ("holdout", cand_harness, cand_policy),
            ],
        )
        clusterer = self.clusterer_of(agent)
        safety = self.gates.safety_gate(suite, cand_harness, base_harness, cand_policy, base_policy, clusterer)
        out: dict[str, Any] = {"safety": safety.to_dict()}
        if not safety.passed:
            return out
        replay = self.gates.replay_gate(suite, cand_harness, base_harness, cand_policy, base_policy, clusterer)
        out["replay"] = replay.to_dict()
        return out

    def _start(self, decision: Decision, report: TickReport) -> None:
        assert decision.candidate_version and decision.candidate_kind
        if not self.config.use_canary or self.config.canary.share <= 0:
            self.registry.promote(decision.candidate_version, reason=f"decision {decision.id}: gates passed")
            self.journal.update_decision(decision.id, state=DecisionState.promoted)
            report.actions.append(f"{decision.agent}: promoted {decision.candidate_version} (no canary)")
            return
        self.registry.start_canary(decision.candidate_version, reason=f"decision {decision.id}")
        rollout = self.journal.start_rollout(
            decision.agent,
            decision.candidate_kind,
            decision.candidate_version,
            decision.baseline_version,
            self.config.canary.share,
            decision.id,
        )
        self.journal.update_decision(decision.id, state=DecisionState.canary, rollout_id=rollout.id)
        report.actions.append(
            f"{decision.agent}: {decision.lever.value} candidate {decision.candidate_version} in canary "
            f"({self.config.canary.share:.0%} of new sessions, rollout {rollout.id})"
        )
        self._refresh_router()

    # ------------------------------------------------------------------ rollouts

    @staticmethod
    def _arm(runs: list[RunSummary], rollout: Rollout, version: str | None) -> list[RunSummary]:
        attr = "harness_version" if rollout.kind == VersionKind.harness else "policy_version"
        return [r for r in runs if getattr(r, attr) == version and r.started_at >= rollout.started_at]

    def _advance_rollout(self, rollout: Rollout, runs: list[RunSummary], report: TickReport) -> None:
        cand = self._arm(runs, rollout, rollout.candidate_version)
        base = self._arm(runs, rollout, rollout.baseline_version)
        result, detail = analyze_canary(cand, base, self.config.canary)
        analyses = [*rollout.analyses, {"at": now().isoformat(), "result": result.value, **detail}]
        self.journal.update_rollout(rollout.id, analyses=analyses)
        if result == AnalysisResult.successful:
            self.promote(rollout.id, actor="control-plane", reason=detail["reason"])
            report.actions.append(f"{rollout.agent}: canary {rollout.id} successful ({detail['reason']}): promoted")
        elif result == AnalysisResult.failed:
            self.rollback(rollout.id, actor="control-plane", reason=detail["reason"], verdict=Verdict.harmful)
            report.actions.append(f"{rollout.agent}: canary {rollout.id} failed ({detail['reason']}): rolled back")
        elif len(cand) >= self.config.canary.min_runs:
            if rollout.extensions >= self.config.canary.max_extensions:
                self.journal.update_rollout(rollout.id, state=RolloutState.paused)
                if rollout.decision_id:
                    self.journal.update_decision(rollout.decision_id, state=DecisionState.paused)
                report.actions.append(f"{rollout.agent}: canary {rollout.id} inconclusive: paused for a human")
            else:
                self.journal.update_rollout(rollout.id, extensions=rollout.extensions + 1)
                report.actions.append(f"{rollout.agent}: canary {rollout.id} inconclusive: extended")
        else:
            report.actions.append(f"{rollout.agent}: canary {rollout.id} collecting ({detail['reason']})")

    def promote(self, rollout_id: str, *, actor: str = "user", reason: str = "promoted by hand") -> Rollout:
        rollout = self.journal.rollout(rollout_id)
        if rollout.state not in (RolloutState.running, RolloutState.paused):
            raise ControlError(f"rollout {rollout.id} is {rollout.state.value}; only running or paused ones promote")
        self.registry.promote(rollout.candidate_version, reason=reason, actor=actor)
        rollout = self.journal.update_rollout(rollout.id, state=RolloutState.promoted, ended_at=now())
        if rollout.decision_id:
            self.journal.update_decision(rollout.decision_id, state=DecisionState.promoted)
        self._refresh_router()
        self._sync_adapters()
        return rollout

    def rollback(
        self,
        rollout_id: str,
        *,
        actor: str = "user",
        reason: str = "rolled back by hand",
        verdict: Verdict | None = None,
    ) -> Rollout:
        rollout = self.journal.rollout(rollout_id)
        if rollout.state == RolloutState.promoted:
            if rollout.baseline_version is None:
                raise ControlError(f"rollout {rollout.id} has no baseline to restore")
            self.registry.restore(rollout.baseline_version, reason=f"rollback of {rollout.id}: {reason}", actor=actor)
            if self.registry.get(rollout.candidate_version).state == VersionState.retired:
                self.registry.reject(rollout.candidate_version, reason=reason, actor=actor)
        elif rollout.state in (RolloutState.running, RolloutState.paused):
            self.registry.reject(rollout.candidate_version, reason=reason, actor=actor)
        else:
            raise ControlError(f"rollout {rollout.id} is already {rollout.state.value}")
        rollout = self.journal.update_rollout(rollout.id, state=RolloutState.rolled_back, ended_at=now())
        if rollout.decision_id:
            values: dict[str, Any] = {"state": DecisionState.rolled_back}
            if verdict is not None:
                values |= {"verdict": verdict, "verdict_detail": {"measured_on": "canary", "reason": reason}}
            self.journal.update_decision(rollout.decision_id, **values)
        self._refresh_router()
        self._sync_adapters()
        return rollout

    def approve(self, decision_id: str, *, actor: str = "user") -> Decision:
        decision = self.journal.decision(decision_id)
        if decision.state != DecisionState.awaiting_approval:
            raise ControlError(f"decision {decision.id} is {decision.state.value}, not awaiting approval")
        decision = self.journal.update_decision(decision.id, approved_by=actor)
        report = TickReport(leader=True)
        self._start(decision, report)
        return self.journal.decision(decision.id)

    # ------------------------------------------------------------------ verdicts

    def _judge(self, decision: Decision, runs: list[RunSummary], report: TickReport) -> None:
        attr = "harness_version" if decision.candidate_kind != VersionKind.policy else "policy_version"
        after = [
            r
            for r in runs
            if getattr(r, attr) == decision.candidate_version
            and r.started_at >= decision.created_at
            and r.success is not None
        ]
        if len(after) < self.config.verdict_min_runs:
            return
        verdict, detail = measure_verdict(decision, after, self.config.verdict_delta)
        self.journal.update_decision(decision.id, verdict=verdict, verdict_detail=detail)
        report.actions.append(f"{decision.agent}: verdict on {decision.lever.value} {decision.id}: {verdict.value}")

    # ------------------------------------------------------------------ reading

    def status(self, agent: str | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in [agent] if agent else self.registry.agents():
            runs = self.runs(name)
            stats = compute_statistics(name, runs)

            def version(kind: VersionKind, state: VersionState, who: str = name) -> str | None:
                v = self.registry.current(who, kind, state)
                return v.id if v else None

            out[name] = {
                "harness": {
                    "active": version(VersionKind.harness, VersionState.active),
                    "canary": version(VersionKind.harness, VersionState.canary),
                },
                "policy": {
                    "active": version(VersionKind.policy, VersionState.active),
                    "canary": version(VersionKind.policy, VersionState.canary),
                },
                "rollouts": [
                    r.model_dump(mode="json", exclude={"analyses"})
                    for r in self.journal.rollouts(name, [RolloutState.running, RolloutState.paused])
                ],
                "runs": stats.window,
                "success_rate": stats.overall.success_rate,
                "success_ci": stats.overall.success_ci,
                "clusters": {c: {"n": g.n, "success_rate": g.success_rate} for c, g in stats.clusters.items()},
                "decisions": len(self.journal.decisions(name)),
                "judge": judge_agreement(runs, self.config.success_threshold),
                "calibration": calibration(self.journal.decisions(name, limit=200)),
            }
        return out

    def _sync_adapters(self) -> list[str]:
        """Unload retired adapters from the policy servers, load serving ones (control/adapters.py)."""
        if self.adapters is None:
            return []
        try:
            return self.adapters.sync(Registry(self.store.engine, tenant=None))
        except Exception as err:  # the next change retries; serving never waits for it
            log.exception("adapter sync failed")
            return [f"adapters not synchronised: {type(err).__name__}: {err}"]

    def _refresh_router(self) -> None:
        if self.router is not None:
            try:
                self.router.refresh()
            except Exception:  # the router's own refresh loop catches up
                log.exception("router refresh failed")


def measure_verdict(decision: Decision, after: list[RunSummary], delta: float) -> tuple[Verdict, dict[str, Any]]:
    """Per-cluster before/after success: effective / partially effective / ineffective / harmful."""
    before: dict[str, list[int]] = decision.evidence.get("before", {})
    after_by: dict[str, list[int]] = {}
    for r in after:
        row = after_by.setdefault(r.cluster, [0, 0])
        row[0] += bool(r.success)
        row[1] += 1
    clusters: dict[str, dict[str, Any]] = {}
    improved, harmed = [], []
    for c in sorted(set(before) | set(after_by)):
        bs, bn = before.get(c, [0, 0])
        as_, an = after_by.get(c, [0, 0])
        if bn == 0 or an == 0:
            continue
        d = as_ / an - bs / bn
        clusters[c] = {"before": [bs, bn], "after": [as_, an], "delta": round(d, 3)}
        if d >= delta:
            improved.append(c)
        elif d <= -delta:
            harmed.append(c)
    b_s = sum(v[0] for v in before.values())
    b_n = sum(v[1] for v in before.values())
    a_s = sum(1 for r in after if r.success)
    a_n = len(after)
    p_worse = worse_pvalue(a_s, a_n, b_s, b_n)
    violations = sum(1 for r in after if r.violations)
    predicted = [c for c in decision.predicted.get("improve", []) if c in clusters]
    detail = {
        "measured_on": "live",
        "predicted_effect": decision.predicted.get("effect"),
        "measured_effect": round(a_s / a_n - b_s / b_n, 4) if a_n and b_n else None,
        "clusters": clusters,
        "improved": improved,
        "harmed": harmed,
        "overall": {"before": [b_s, b_n], "after": [a_s, a_n], "after_ci": wilson_interval(a_s, a_n)},
        "p_worse": p_worse,
        "violations_after": violations,
    }
    if p_worse < 0.05:
        return Verdict.harmful, detail
    if predicted and all(c in improved for c in predicted) and not harmed:
        return Verdict.effective, detail
    if improved or (b_n and a_s / a_n - b_s / b_n >= delta):
        return Verdict.partially_effective, detail
    return Verdict.ineffective, detail
