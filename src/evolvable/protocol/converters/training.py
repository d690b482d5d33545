"""Training views of trajectories: SFT chat records and preference pairs.

Every record carries the trajectory's harness and policy versions, so data collected
under a stale harness stays visible downstream instead of being mixed in silently.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from evolvable.protocol.models import ChatMessage, LLMCallStep, StepStatus, Trajectory


def _provenance(t: Trajectory) -> dict[str, Any]:
    return {
        "trajectory_id": t.id,
        "tenant_id": t.tenant_id,
        "agent": t.agent,
        "task_id": t.task_id,
        "harness_version": t.harness_version,
        "policy_version": t.policy_version,
        "outcome": t.outcome(),
        "status": str(t.status),
    }


def _final_call(t: Trajectory) -> LLMCallStep | None:
    calls = [c for c in t.llm_calls() if c.status == StepStatus.ok and c.response is not None]
    return calls[-1] if calls else None


def conversation(t: Trajectory) -> list[dict[str, Any]]:
    """The conversation as the model last saw it, plus its final answer (OpenAI message dicts)."""
    final = _final_call(t)
    if final is None or final.response is None:  # (_final_call picks a call with a response)
        return []
    msgs: list[ChatMessage] = [*final.request_messages, final.response]
    return [m.model_dump(mode="json", exclude_none=True) for m in msgs]


def to_sft_record(t: Trajectory) -> dict[str, Any] | None:
    """One chat-format SFT record per trajectory (None when it has no successful model call)."""
    final = _final_call(t)
    if final is None:
        return None
    record: dict[str, Any] = {"messages": conversation(t), "metadata": _provenance(t)}
    if final.tools:
        record["tools"] = final.tools
    return record


def to_sft_records(trajectories: Iterable[Trajectory], *, min_outcome: float | None = None) -> list[dict[str, Any]]:
    out = []
    for t in trajectories:
        outcome = t.outcome()
        if min_outcome is not None and (outcome is None or outcome < min_outcome):
            continue
        rec = to_sft_record(t)
        if rec is not None:
            out.append(rec)
    return out


def _task_key(t: Trajectory) -> str | None:
    if t.task_id:
        return f"task:{t.task_id}"
    final = _final_call(t)
    if final is None:
        return None
    first_user = next((m.text() for m in final.request_messages if m.role == "user"), None)
    return f"input:{first_user}" if first_user else None


def to_preference_pairs(trajectories: Iterable[Trajectory], *, min_margin: float = 1e-9) -> list[dict[str, Any]]:
    """Pairs (chosen, rejected) from runs of the same task with different outcomes.

    The prompt is the shared prefix of the two conversations; chosen and rejected are
    the diverging remainders. Runs of one task are paired best against worst.
    """
    groups: dict[str, list[Trajectory]] = defaultdict(list)
    for t in trajectories:
        key = _task_key(t)
        if key is not None and t.outcome() is not None:
            groups[key].append(t)
    pairs = []
    for key, runs in groups.items():
        runs.sort(key=lambda r: r.outcome() or 0.0, reverse=True)
        best, worst = runs[0], runs[-1]
        if (best.outcome() or 0.0) - (worst.outcome() or 0.0) < min_margin:
            continue
        a, b = conversation(best), conversation(worst)
        k = 0
        while k < min(len(a), len(b)) and a[k] == b[k]:
            k += 1
        if k == len(a) or k == len(b):
            continue
        pairs.append(
            {
                "prompt": a[:k],
                "chosen": a[k:],
                "rejected": b[k:],
                "metadata": {"task": key, "chosen": _provenance(best), "rejected": _provenance(worst)},
            }
        )
    return pairs
