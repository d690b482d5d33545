"""The lever decision: explainable rules from statistics to memory, tool, skill, prompt, weights or rollback.

Every rule says whether its lever applies (its evidence holds, the lever is enabled and its target
is not cooling down after a failed attempt). A regression's rollback wins outright; among the other
applicable levers the one with the highest expected gain per cost wins (`lever_choice.py`: from the
statistics and this agent's past verdicts of each lever on those clusters), ties going to the
smaller blast radius. Every proposal carries the rule that fired, the statistics it read, the
clusters it expects to improve or put at risk, the ranking, and a numeric predicted effect that the
verdict is later scored against, so `evolvable decisions` can show why and how well it predicted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from evolvable.control.lever_choice import expect
from evolvable.control.models import Decision, DecisionState, Lever, Verdict
from evolvable.control.statistics import AgentStatistics, RunSummary
from evolvable.control.stats_math import worse_pvalue
from evolvable.protocol.harness import Harness

HARNESS_LEVERS = frozenset({Lever.memory, Lever.tool, Lever.skill, Lever.prompt})
ALL_LEVERS = HARNESS_LEVERS | {Lever.weights, Lever.rollback}
UNSUCCESSFUL = frozenset({DecisionState.gated_out, DecisionState.rolled_back, DecisionState.failed})


@dataclass
class DecisionConfig:
    levers: frozenset[Lever] = ALL_LEVERS
    """Levers the control plane may pull (ablations restrict this)."""
    min_runs: int = 20
    """No decision before this many finished runs in the window."""
    min_cluster_runs: int = 3
    target_success: float = 0.9
    """A cluster below this success rate is failing."""
    exemplars_per_cluster: int = 2
    argument_error_min: int = 3
    """Recurring argument errors on one tool before the tool lever fires."""
    recurring_label_min: int = 3
    broad_failure_share: float = 0.5
    """At least this share of clusters failing with shared labels is a broad failure (prompt)."""
    weights_min_runs: int = 200
    weights_min_reward_variance: float = 0.02
    harness_stall: int = 2
    """This many recent harness decisions without a gain means harness edits stopped paying off."""
    regression_alpha: float = 0.05
    regression_min_runs: int = 10
    cooldown: int = 4
    """A lever+target that just failed is not retried within this many decisions."""
    approval_levers: frozenset[Lever] = frozenset()
    """Levers whose candidates wait for `evolvable approve` after the gates pass."""
    rank_by_evidence: bool = True
    """False: the first applicable rule wins (the fixed cascade, for ablations)."""


@dataclass
class Proposal:
    lever: Lever
    rule: str
    rationale: str
    target: dict[str, Any] = field(default_factory=dict)
    improve: list[str] = field(default_factory=list)
    at_risk: list[str] = field(default_factory=list)
    evidence: dict[str, Any] = field(default_factory=dict)
    expected: dict[str, Any] = field(default_factory=dict)
    """The expectation it was chosen on: gap, p_success, closure, effect (predicted change in success), cost."""

    @property
    def target_key(self) -> str:
        key = f"{self.lever.value}:{sorted(self.target.get('clusters', []))}:{self.target.get('tool', '')}"
        return key + (":explore" if self.target.get("explore") else "")


@dataclass
class DecisionContext:
    stats: AgentStatistics
    active_harness: Harness
    active_version: str
    parent_version: str | None
    """The version the active one replaced (rollback target), when it was active before."""
    recent: list[Decision] = field(default_factory=list)
    """The agent's recent decisions, newest first."""
    weights_available: bool = True
    runs: list[RunSummary] = field(default_factory=list)
    """The window's runs (all harness versions), for rules that look at individual runs."""
    can_explore: bool = False
    """The agent's replay runner can re-run recorded tasks in search of successes (exploration by replay)."""
    history: list[Decision] | None = None
    """Past decisions the lever ranking learns from (None: `recent`)."""


def _failing_clusters(stats: AgentStatistics, cfg: DecisionConfig) -> list[str]:
    return [c for c, g in stats.clusters.items() if g.n >= cfg.min_cluster_runs and g.success_rate < cfg.target_success]


def _rates(stats: AgentStatistics, clusters: list[str]) -> str:
    """'a (20%), b (0%)': the clusters a rationale names, with their success rates."""
    return ", ".join(f"{c} ({stats.clusters[c].success_rate:.0%})" for c in clusters)


def _cooling(ctx: DecisionContext, proposal: Proposal, cfg: DecisionConfig) -> bool:
    for d in ctx.recent[: cfg.cooldown]:
        if d.evidence.get("target_key") != proposal.target_key or "interrupted" in d.gates:
            continue  # a decision cut off by a dying leader failed on no merit: it is redone, not cooled
        if d.gates.get("pending"):
            continue  # its background job runs on; the next decision picks up its outcome
        if d.state in UNSUCCESSFUL or d.verdict in (Verdict.ineffective, Verdict.harmful):
            return True
        if d.state in (DecisionState.unavailable, DecisionState.awaiting_approval, DecisionState.paused):
            return True
    return False


def _harness_stalled(ctx: DecisionContext, cfg: DecisionConfig) -> bool:
    harness_decisions = [d for d in ctx.recent if d.lever in HARNESS_LEVERS][: cfg.harness_stall]
    if len(harness_decisions) < cfg.harness_stall:
        return False
    return all(
        d.state in UNSUCCESSFUL or d.verdict in (Verdict.ineffective, Verdict.harmful) for d in harness_decisions
    )


def rule_rollback(ctx: DecisionContext, cfg: DecisionConfig) -> Proposal | None:
    """The active version does significantly worse than the one it replaced: restore that one."""
    if ctx.parent_version is None:
        return None
    current = ctx.stats.by_harness_version.get(ctx.active_version)
    previous = ctx.stats.by_harness_version.get(ctx.parent_version)
    if current is None or previous is None or min(current.n, previous.n) < cfg.regression_min_runs:
        return None
    p = worse_pvalue(current.successes, current.n, previous.successes, previous.n)
    if p >= cfg.regression_alpha and current.violations <= previous.violations:
        return None
    return Proposal(
        Lever.rollback,
        "regression",
        f"active {ctx.active_version} succeeds {current.success_rate:.0%} (n={current.n}) vs "
        f"{previous.success_rate:.0%} (n={previous.n}) for {ctx.parent_version} (one-sided Fisher p={p:.3f})"
        + (f"; violations {current.violations} vs {previous.violations}" if current.violations else ""),
        target={"restore": ctx.parent_version},
        improve=sorted(ctx.stats.clusters),
        evidence={"p_value": p, "current": current.to_dict(), "previous": previous.to_dict()},
    )


def rule_memory(ctx: DecisionContext, cfg: DecisionConfig) -> Proposal | None:
    """Failing clusters where successful runs exist that are not yet exemplars: show the model those.

    When no failing cluster has a success of its own and the agent's replay runner can explore, its
    recorded tasks are searched for verified successes (exploration by replay). Otherwise successful
    tool-using runs of other clusters still demonstrate the action format (how to call a tool, read
    the result, reply); they are offered as general exemplars. Smallest blast radius of all levers,
    and the gates decide.
    """
    in_memory: dict[str, set[str]] = {}
    for ex in ctx.active_harness.memory:
        in_memory.setdefault(ex.cluster or "", set()).add(ex.source_trajectory_id or ex.id)
    failing = _failing_clusters(ctx.stats, cfg)
    clusters = [
        c
        for c in failing
        if ctx.stats.successful_runs.get(c, 0) > len(in_memory.get(c, set())) and ctx.stats.successful_runs.get(c, 0)
    ]
    if clusters:
        return Proposal(
            Lever.memory,
            "failing clusters with successful exemplars",
            f"clusters {_rates(ctx.stats, clusters)} fail, and successful runs of them exist to use as exemplars",
            target={"clusters": clusters},
            improve=clusters,
            at_risk=[],
            evidence={c: ctx.stats.clusters[c].to_dict() for c in clusters},
        )
    explorable = sorted(
        c
        for c in failing
        if len(in_memory.get(c, set())) < cfg.exemplars_per_cluster
        and any(r.cluster == c and r.task_id and not r.success for r in ctx.runs)
    )
    if ctx.can_explore and explorable:
        return Proposal(
            Lever.memory,
            "explore failing clusters by replay",
            f"clusters {_rates(ctx.stats, explorable)} fail with no successful runs to use as exemplars; "
            "their recorded tasks can be replayed and searched for verified successes",
            target={"clusters": explorable, "explore": True},
            improve=explorable,
            at_risk=[c for c in ctx.stats.clusters if c not in explorable],
            evidence={c: ctx.stats.clusters[c].to_dict() for c in explorable},
        )
    used = set().union(*in_memory.values()) if in_memory else set()
    donors = sorted(
        {r.cluster for r in ctx.runs if r.success and r.tool_calls and not r.violations and r.trajectory_id not in used}
    )
    if not failing or not donors:
        return None
    return Proposal(
        Lever.memory,
        "format exemplars from other clusters",
        f"clusters {_rates(ctx.stats, failing)} fail with no successes of their own; successful tool-using runs of "
        + ", ".join(donors)
        + " show the action format",
        target={"clusters": sorted(failing), "donors": donors},
        improve=failing,
        at_risk=donors,
        evidence={"failing": {c: ctx.stats.clusters[c].to_dict() for c in failing}, "donors": donors},
    )


def rule_tool(ctx: DecisionContext, cfg: DecisionConfig) -> Proposal | None:
    """A recurring argument error on one tool: clarify that tool's description."""
    ranked = sorted(ctx.stats.argument_errors.items(), key=lambda kv: -sum(kv[1].values()))
    for tool, messages in ranked:
        count = sum(messages.values())
        if count < cfg.argument_error_min or ctx.active_harness.tool(tool) is None:
            continue
        users = [c for c, g in ctx.stats.clusters.items() if any(k.startswith(f"{tool}:") for k in g.tool_errors)]
        return Proposal(
            Lever.tool,
            "recurring argument error",
            f"{count} argument errors on tool {tool!r}: " + "; ".join(list(messages)[:2]),
            target={"tool": tool, "clusters": []},
            improve=users,
            at_risk=[c for c in ctx.stats.clusters if c not in users],
            evidence={"tool": tool, "errors": messages},
        )
    return None


def rule_skill(ctx: DecisionContext, cfg: DecisionConfig) -> Proposal | None:
    """Failing clusters with a recurring failure label: a skill scoped to those clusters."""
    clusters = []
    labels: dict[str, dict[str, int]] = {}
    for c in _failing_clusters(ctx.stats, cfg):
        top = {k: v for k, v in ctx.stats.clusters[c].failure_labels.items() if v >= cfg.recurring_label_min}
        if top:
            clusters.append(c)
            labels[c] = top
    if not clusters:
        return None
    return Proposal(
        Lever.skill,
        "recurring failure in clusters",
        "; ".join(f"{c}: " + ", ".join(f"{k}×{v}" for k, v in list(labels[c].items())[:3]) for c in clusters),
        target={"clusters": clusters},
        improve=clusters,
        at_risk=[],
        evidence={"labels": labels},
    )


def rule_prompt(ctx: DecisionContext, cfg: DecisionConfig) -> Proposal | None:
    """Failures across most clusters with shared labels: edit the system prompt (everything is at risk)."""
    failing = _failing_clusters(ctx.stats, cfg)
    if not ctx.stats.clusters or len(failing) / len(ctx.stats.clusters) < cfg.broad_failure_share:
        return None
    shared = {k: v for k, v in ctx.stats.overall.failure_labels.items() if v >= cfg.recurring_label_min}
    if not shared:
        return None
    return Proposal(
        Lever.prompt,
        "broad failures",
        f"{len(failing)}/{len(ctx.stats.clusters)} clusters below {cfg.target_success:.0%}; shared failure labels "
        + ", ".join(f"{k}×{v}" for k, v in list(shared.items())[:4]),
        target={"clusters": []},
        improve=failing,
        at_risk=[c for c in ctx.stats.clusters if c not in failing],
        evidence={"labels": shared, "failing": failing},
    )


def rule_weights(ctx: DecisionContext, cfg: DecisionConfig) -> Proposal | None:
    """Enough data, reward variance to learn from, and harness edits stopped paying off: train."""
    since = ctx.stats.since_weight_update
    failing = _failing_clusters(ctx.stats, cfg)
    if not failing or since["runs"] < cfg.weights_min_runs:
        return None
    if since["reward_variance"] < cfg.weights_min_reward_variance:
        return None
    if HARNESS_LEVERS & cfg.levers and not _harness_stalled(ctx, cfg):
        return None
    return Proposal(
        Lever.weights,
        "harness edits stalled",
        f"{since['runs']} runs since the last weight update (reward variance {since['reward_variance']:.3f}); "
        f"the last {cfg.harness_stall} harness edits did not pay off",
        target={"clusters": []},
        improve=failing,
        at_risk=sorted(ctx.stats.clusters),
        evidence={"since_weight_update": since},
    )


RULES = (rule_rollback, rule_memory, rule_tool, rule_skill, rule_prompt, rule_weights)


def decide(ctx: DecisionContext, cfg: DecisionConfig) -> tuple[Proposal | None, list[str]]:
    """The chosen proposal (rollback first, else the best expected gain per cost), and why the others lost."""
    trace: list[str] = []
    if ctx.stats.window < cfg.min_runs:
        return None, [f"only {ctx.stats.window} finished runs in the window (< {cfg.min_runs})"]
    applicable: list[tuple[str, Proposal]] = []
    for rule in RULES:
        proposal = rule(ctx, cfg)
        name = rule.__name__.removeprefix("rule_")
        if proposal is None:
            trace.append(f"{name}: evidence does not hold")
            continue
        if proposal.lever not in cfg.levers:
            trace.append(f"{name}: lever {proposal.lever.value} disabled")
            continue
        if _cooling(ctx, proposal, cfg):
            trace.append(f"{name}: {proposal.target_key} failed recently (cooldown)")
            continue
        history = ctx.history if ctx.history is not None else ctx.recent
        proposal.expected = expect(proposal.lever, proposal.improve, ctx.stats, history, cfg.target_success).to_dict()
        applicable.append((name, proposal))
        if proposal.lever == Lever.rollback or not cfg.rank_by_evidence:
            break
    if not applicable:
        return None, trace
    ranked = sorted(applicable, key=lambda np: -np[1].expected["score"])  # stable: ties keep rule order
    if applicable[-1][1].lever == Lever.rollback or not cfg.rank_by_evidence:
        ranked = [applicable[-1]]
    name, chosen = ranked[0]
    for other, p in ranked[1:]:
        trace.append(f"{other}: applies, ranked below {name} (score {p.expected['score']:.4f})")
    chosen.evidence["target_key"] = chosen.target_key
    chosen.evidence["ranking"] = [{"rule": n, "lever": p.lever.value, **p.expected} for n, p in ranked]
    chosen.evidence["trace"] = [*trace, f"{name}: fired (expected effect {chosen.expected['effect']:+.3f})"]
    return chosen, trace
