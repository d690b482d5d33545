"""Memory: successful runs of failing clusters become exemplars, retrieved per cluster at request time."""

from __future__ import annotations

from typing import Any

from evolvable.control.decision import Proposal
from evolvable.control.evolvers.base import EvolveContext, HarnessCandidate, LeverUnavailable
from evolvable.control.exploration import explorer_of
from evolvable.control.models import Lever
from evolvable.control.statistics import RunSummary, task_text_of
from evolvable.errors import NotFound
from evolvable.protocol.harness import MemoryExemplar
from evolvable.protocol.models import ChatMessage, LLMCallStep, Trajectory


def exemplar_from_trajectory(t: Trajectory, cluster: str | None = None) -> MemoryExemplar | None:
    """The recorded conversation as few-shot turns: from the task's user turn to the final answer.

    The proxy records what it sent upstream, i.e. after harness application, so the system prompt and
    any retrieved exemplars are cut: the episode starts at the last user turn that carries the task.
    """
    calls = [s for s in t.steps if isinstance(s, LLMCallStep) and s.response is not None]
    if not calls:
        return None
    last = calls[-1]
    messages = [m for m in last.request_messages if m.role not in ("system", "developer")]
    task_text = task_text_of(t).strip()
    start = 0
    for i, m in enumerate(messages):
        if m.role == "user" and task_text and m.text().strip() == task_text:
            start = i
    if start == 0 and task_text:
        for i, m in enumerate(messages):
            if m.role == "user" and task_text[:80] in m.text():
                start = i
    turns = [*messages[start:], last.response]
    clean = [
        ChatMessage(role=m.role, content=m.text()) for m in turns if m is not None and m.role in ("user", "assistant")
    ]
    if not clean or clean[0].role != "user" or clean[-1].role != "assistant":
        return None
    return MemoryExemplar(
        id=f"ex-{t.id}",
        cluster=cluster,
        task_input=task_text or clean[0].text(),
        messages=clean,
        reward=t.outcome(),
        source_trajectory_id=t.id,
    )


class MemoryEvolver:
    lever = Lever.memory

    def __init__(self, per_cluster: int = 2, max_exemplars: int = 32, explore_tasks: int = 2) -> None:
        self.per_cluster = per_cluster
        self.max_exemplars = max_exemplars
        self.explore_tasks = explore_tasks
        """Recorded failed tasks per cluster that exploration replays."""

    def _explore(self, ctx: EvolveContext, proposal: Proposal) -> HarnessCandidate:
        """Replay recorded failed tasks of the target clusters through the runner's search; verified
        successes become that cluster's exemplars."""
        explorer = explorer_of(ctx.suite)
        if explorer is None:
            raise LeverUnavailable("exploration needs a replay runner that can explore (none registered)")
        harness = ctx.active_harness
        clusters: list[str] = proposal.target.get("clusters") or []
        tasks: list[Any] = []
        source_run: dict[str, str] = {}
        newest_first = sorted(ctx.runs, key=lambda r: r.started_at, reverse=True)
        for cluster in clusters:
            seen: set[str] = set()
            for run in newest_first:
                if len(seen) >= self.explore_tasks:
                    break
                if run.cluster != cluster or run.success or not run.task_id or run.task_id in seen:
                    continue
                task = explorer.recorded_task(run.task_id, cluster)
                if task is not None:
                    seen.add(run.task_id)
                    tasks.append(task)
                    source_run[run.task_id] = run.trajectory_id
        if not tasks:
            raise LeverUnavailable(f"no recorded tasks of {clusters} can be replayed for exploration")
        policy = ctx.active_policy.policy() if ctx.active_policy else None
        report = explorer.explore(harness, policy, tasks)
        new: list[MemoryExemplar] = []
        added: dict[str, list[str]] = {}
        for cluster in clusters:
            found = [_sourced(ex, source_run) for ex in report.exemplars if ex.cluster == cluster][: self.per_cluster]
            new += found
            if found:
                added[cluster] = [ex.id for ex in found]
        if not new:
            raise LeverUnavailable(
                f"exploration found no verified success in {report.tasks} task(s) of {clusters} "
                f"({report.episodes} episodes)"
            )
        keep = [ex for ex in harness.memory if ex.cluster not in added]
        candidate = harness.model_copy(
            update={"memory": (new + keep)[: self.max_exemplars], "memory_k": self._cluster_k(harness.memory_k)}
        )
        return HarnessCandidate(
            harness=candidate,
            note="memory: explored exemplars for " + ", ".join(f"{c} ({len(v)})" for c, v in added.items()),
            changes={"added_exemplars": added, "exploration": report.to_dict()},
        )

    def _cluster_k(self, memory_k: int) -> int:
        """Retrieve as many exemplars as the lever adds per cluster: a request sees every worked example of
        its cluster, so the values that differ between them (ids, amounts) read as the ticket's own, not as
        constants to copy. With one exemplar shown, the 135M model copied its user id into tickets worded
        differently (IT helpdesk, varied wordings, 2026-11-26, 20 tickets of an unused seed: 16/20 with k 1,
        18/20 with k 2)."""
        return max(memory_k, self.per_cluster, 1)

    def _candidates(self, ctx: EvolveContext, cluster: str) -> list[RunSummary]:
        good = [r for r in ctx.runs if r.cluster == cluster and r.success and not r.violations and not r.tool_errors]
        good += [r for r in ctx.runs if r.cluster == cluster and r.success and not r.violations and r.tool_errors]
        # The cleanest, highest-reward, most recent runs first.
        return sorted(good, key=lambda r: (not r.tool_errors, r.reward or 0.0, r.started_at), reverse=True)

    def _exemplars(self, ctx: EvolveContext, runs: list[RunSummary], cluster: str | None) -> list[MemoryExemplar]:
        """The first `per_cluster` of `runs` (best first) that still exist and convert to exemplars."""
        out: list[MemoryExemplar] = []
        for run in runs:
            if len(out) >= self.per_cluster:
                break
            try:
                t = ctx.store.get_trajectory(run.trajectory_id)
            except NotFound:
                continue
            ex = exemplar_from_trajectory(t, cluster)
            if ex is not None:
                out.append(ex)
        return out

    def _format_runs(self, ctx: EvolveContext, donors: list[str]) -> list[RunSummary]:
        """Successful tool-using runs of other clusters, to serve as general exemplars (any task retrieves them)."""
        used = {ex.source_trajectory_id for ex in ctx.active_harness.memory}
        runs = [
            r
            for r in ctx.runs
            if r.cluster in donors and r.success and r.tool_calls and not r.violations and r.trajectory_id not in used
        ]
        return sorted(
            runs, key=lambda r: (not r.tool_errors, r.tool_calls, r.reward or 0.0, r.started_at), reverse=True
        )

    def propose(self, ctx: EvolveContext, proposal: Proposal) -> HarnessCandidate:
        if proposal.target.get("explore"):
            return self._explore(ctx, proposal)
        harness = ctx.active_harness
        donors = proposal.target.get("donors")
        if donors:
            new = self._exemplars(ctx, self._format_runs(ctx, donors), None)
            if not new:
                raise LeverUnavailable(f"no usable successful tool-using trajectories in {donors}")
            candidate = harness.model_copy(
                update={"memory": (new + harness.memory)[: self.max_exemplars], "memory_k": max(harness.memory_k, 1)}
            )
            return HarnessCandidate(
                harness=candidate,
                note=f"memory: {len(new)} format exemplar(s) from {', '.join(donors)}",
                changes={"added_exemplars": {"*": [ex.source_trajectory_id for ex in new]}},
            )
        clusters = proposal.target.get("clusters") or []
        keep = [ex for ex in harness.memory if ex.cluster not in clusters]
        added: dict[str, list[str]] = {}
        new = []
        for cluster in clusters:
            found = self._exemplars(ctx, self._candidates(ctx, cluster), cluster)
            new += found
            if found:
                added[cluster] = [ex.source_trajectory_id or ex.id for ex in found]
        if not new:
            raise LeverUnavailable(f"no usable successful trajectories for clusters {clusters}")
        memory = (new + keep)[: self.max_exemplars]
        memory_k = self._cluster_k(harness.memory_k)
        candidate = harness.model_copy(update={"memory": memory, "memory_k": memory_k})
        return HarnessCandidate(
            harness=candidate,
            note="memory: exemplars for " + ", ".join(f"{c} ({len(v)})" for c, v in added.items()),
            changes={"added_exemplars": added},
        )


def _sourced(exemplar: MemoryExemplar, source_run: dict[str, str]) -> MemoryExemplar:
    """An explored exemplar names the recorded run whose task it solved (so purging that run erases it)."""
    if exemplar.source_trajectory_id:
        return exemplar
    run = next((rid for tid, rid in source_run.items() if tid in exemplar.id), None)
    return exemplar.model_copy(update={"source_trajectory_id": run}) if run else exemplar
