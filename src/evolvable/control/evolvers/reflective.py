"""Skills and prompt: reflective edits from failure evidence, as itemised playbook updates.

With an evolver model configured (any OpenAI-compatible endpoint; in production a stronger model
than the agent's) the model reads the evidence of a cluster (failed and successful runs, verifier
and judge reasons) and answers with `add` / `patch` operations on the playbook's numbered items
(ACE: itemised updates, never a rewrite that drops what worked). The playbook it edits comes from
the harness version on the Pareto front that does best on that cluster (GEPA), which may be an
earlier version than the active one: an edit that helped one cluster is not lost.

Without a model, or when its answer is unusable, a general distillation appends items: the tool
sequence successful runs followed, the verifiers' and judge's own reasons, and a one-line hint per
failure label. It names no domain; it only restates what the evidence says.
"""

from __future__ import annotations

import json
import logging
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from evolvable.control.decision import Proposal
from evolvable.control.evolvers.base import EvolveContext, HarnessCandidate, LeverUnavailable
from evolvable.control.evolvers.pareto import cluster_rates, parent_for, pareto_front
from evolvable.control.evolvers.playbook import Playbook
from evolvable.control.model_call import chat
from evolvable.control.models import Lever
from evolvable.control.statistics import RunSummary
from evolvable.errors import ControlError, NotFound
from evolvable.protocol.harness import Harness, Skill
from evolvable.protocol.models import SignalKind, StepStatus, Trajectory

log = logging.getLogger(__name__)

LABEL_HINTS = {
    "wrong_tool": "Pick the tool that matches the request before replying.",
    "bad_arguments": "Copy identifiers and values exactly from the request into the tool arguments.",
    "invalid_arguments": "Copy identifiers and values exactly from the request into the tool arguments.",
    "tool_error": "Check the tool result; if it reports an error, fix the arguments instead of guessing.",
    "policy_violation": "Follow the policy strictly; when a request is outside it, refuse politely.",
    "no_reply": "Always finish with a reply to the user.",
    "parse_error": "Answer in exactly the format the instructions ask for, one action per turn.",
    "format_error": "Answer in exactly the format the instructions ask for, one action per turn.",
    "redundant": "Do not repeat a tool call you already made; use its result.",
    "safety_violation": "Never reveal other people's data or internal secrets; refuse such requests.",
    "failure": "",
    "judged_failure": "",
    "decisive_judged_failure": "",
}
RULES_HEADER = "Rules learned from experience:"
OPS_PREFILL = '{"operations": [{"op": "add", "text": "'
MAX_EXAMPLES = 3
EDIT_INSTRUCTIONS = (
    "Answer with JSON only: "
    '{"operations": [{"op": "add", "text": "..."}, {"op": "patch", "item": 2, "text": "..."}]}. '
    "Add a short, concrete, general rule for each distinct failure; patch a numbered item only to fix it. "
    "Never restate the playbook, never remove items, never copy one task's specific values."
)


@dataclass
class EvolverModel:
    """An OpenAI-compatible endpoint that writes edits (e.g. a stronger model than the agent's)."""

    base_url: str
    model: str
    api_key: str = "not-needed"
    timeout_s: float = 60.0
    max_tokens: int = 400
    prefill: bool = False
    """Start the answer as one `add` operation for the model (small models; vLLM's continue_final_message)."""

    def complete(self, prompt: str) -> str:
        text = chat(
            self.base_url,
            self.model,
            self.api_key,
            "You improve the instructions of an AI agent from evidence of its runs.",
            prompt,
            timeout_s=self.timeout_s,
            max_tokens=self.max_tokens,
            prefill=OPS_PREFILL if self.prefill else None,
        )
        if self.prefill and _json_object(text) is None and text.startswith(OPS_PREFILL):
            # The model wrote the rule and ran out of tokens or closed the JSON badly: keep the rule.
            rule = text[len(OPS_PREFILL) :].split('"')[0].strip()
            return json.dumps({"operations": [{"op": "add", "text": rule}]}) if rule else text
        return text


def evolver_model_from_settings(settings: Mapping[str, Any]) -> EvolverModel:
    """An evolver model from plain configuration: base_url, model, api_key, timeout_s, max_tokens."""
    try:
        base_url, model = str(settings["base_url"]), str(settings["model"])
    except KeyError as err:
        raise ValueError(f"evolver settings need {err.args[0]!r}") from None
    return EvolverModel(
        base_url,
        model,
        api_key=str(settings.get("api_key") or "not-needed"),
        timeout_s=float(settings.get("timeout_s", 60.0)),
        max_tokens=int(settings.get("max_tokens", 400)),
        prefill=bool(settings.get("prefill", False)),
    )


def _hint(label: str) -> str:
    if label.startswith("unmet:"):
        return f"The task is only done when this holds: {label.removeprefix('unmet:').replace('_', ' ')}."
    return LABEL_HINTS.get(label, f"Avoid this failure: {label.replace('_', ' ')}.")


def _hints(labels: dict[str, int]) -> list[str]:
    """One sentence for the unmet verifier checks, then one hint per other failure label."""
    unmet = [label.removeprefix("unmet:").replace("_", " ") for label in labels if label.startswith("unmet:")]
    hints = [f"The task is only done when: {', '.join(unmet)}."] if unmet else []
    return hints + [h for h in (_hint(label) for label in labels if not label.startswith("unmet:")) if h]


def _example(t: Trajectory, run: RunSummary) -> dict[str, str]:
    """The task and the final reply of a run, short, for the evolver model to read."""
    from evolvable.control.judge import assistant_turns

    turns = assistant_turns(t)
    return {"task": run.task_text[:200], "final_reply": turns[-1][1][:200] if turns else ""}


def gather_evidence(ctx: EvolveContext, clusters: list[str] | None, max_runs: int = 8) -> dict[str, Any]:
    """Verifier and judge feedback on failing runs, the tool sequences of successful runs, and a few of each."""

    def pick(runs: list[RunSummary]) -> list[RunSummary]:
        return [r for r in runs if clusters is None or r.cluster in clusters][-max_runs:]

    feedback: Counter[str] = Counter()
    labels: Counter[str] = Counter()
    examples: dict[str, list[dict[str, str]]] = {"failed": [], "succeeded": []}
    for run in pick([r for r in ctx.runs if r.success is False]):
        labels.update(set(run.failure_labels))
        try:
            t = ctx.store.get_trajectory(run.trajectory_id)
        except NotFound:
            continue
        if len(examples["failed"]) < MAX_EXAMPLES:
            examples["failed"].append(_example(t, run))
        for sig in t.signals:
            if sig.kind == SignalKind.outcome or sig.value >= 0.5:
                continue
            for key in ("reason", "feedback", "expected", "message"):
                text = sig.metadata.get(key)
                if isinstance(text, str) and text.strip():
                    feedback[text.strip()[:200]] += 1
                    break
    sequences: dict[str, Counter[tuple[str, ...]]] = {}
    for run in pick([r for r in ctx.runs if r.success and not r.violations]):
        try:
            t = ctx.store.get_trajectory(run.trajectory_id)
        except NotFound:
            continue
        if len(examples["succeeded"]) < MAX_EXAMPLES:
            examples["succeeded"].append(_example(t, run))
        seq = tuple(
            f"{s.tool_name}({', '.join(s.arguments) if isinstance(s.arguments, dict) else ''})"
            for s in t.tool_calls()
            if s.status != StepStatus.error
        )
        if seq:
            sequences.setdefault(run.cluster, Counter())[seq] += 1
    return {
        "labels": dict(labels.most_common(6)),
        "feedback": [text for text, _ in feedback.most_common(4)],
        "sequences": {c: list(cnt.most_common(1)[0][0]) for c, cnt in sequences.items()},
        "examples": examples,
    }


def distill_instructions(evidence: dict[str, Any], cluster: str | None) -> list[str]:
    lines: list[str] = []
    seq = evidence["sequences"].get(cluster) if cluster else None
    if seq:
        lines.append("Successful runs did: " + " -> ".join(seq) + ".")
    lines += _hints(evidence["labels"])
    lines += [f"Feedback on failed runs: {text}" for text in evidence["feedback"][:2]]
    return list(dict.fromkeys(lines))


def _json_object(text: str) -> dict[str, Any] | None:
    match = re.search(r"\{.*\}", text, re.DOTALL)
    if not match:
        return None
    try:
        obj = json.loads(match.group(0))
    except json.JSONDecodeError:
        return None
    return obj if isinstance(obj, dict) else None


def _parent_harness(ctx: EvolveContext, cluster: str | None) -> tuple[Harness, str, dict[str, list[str]]]:
    """The harness to edit from: the Pareto-front version best on `cluster` (the active one on ties)."""
    rates = cluster_rates(ctx.runs)
    front = pareto_front(rates)
    version = parent_for(front, rates, cluster, ctx.active_harness_version)
    if version == ctx.active_harness_version:
        return ctx.active_harness, version, front
    from evolvable.control.registry import Registry

    try:
        return Registry(ctx.store.engine).get(version).harness(), version, front
    except (ControlError, NotFound):  # a version the registry no longer has: edit the active one
        return ctx.active_harness, ctx.active_harness_version, front


def write_edits(
    model: EvolverModel | None, playbook: Playbook, what: str, evidence: dict[str, Any], fallback: list[str]
) -> tuple[list[dict[str, Any]], str]:
    """Apply the model's add/patch operations to `playbook`; without a usable answer, append `fallback`.

    Returns the operations applied and how they were written.
    """
    if model is not None:
        prompt = (
            f"{what}\nPlaybook (numbered):\n{playbook.numbered()}\n\n"
            f"Evidence (JSON): {json.dumps(evidence)[:6000]}\n\n{EDIT_INSTRUCTIONS}"
        )
        try:
            obj = _json_object(model.complete(prompt))
        except Exception as err:  # any evolver-model failure falls back to distillation
            log.info("evolver model %s failed: %s", model.model, err)
            obj = None
        if obj is not None:
            applied, refused = playbook.apply(obj.get("operations"))
            if applied:
                return applied, f"written by {model.model}" + (f", {len(refused)} op(s) refused" if refused else "")
    return [{"op": "add", "text": text} for text in playbook.extend(fallback)], "distilled"


class SkillEvolver:
    lever = Lever.skill

    def __init__(self, model: EvolverModel | None = None) -> None:
        self.model = model

    def propose(self, ctx: EvolveContext, proposal: Proposal) -> HarnessCandidate:
        clusters = proposal.target.get("clusters") or []
        if not clusters:
            raise LeverUnavailable("skill lever needs target clusters")
        harness = ctx.active_harness
        skills = {s.name: s for s in harness.skills}
        changes: dict[str, Any] = {"clusters": [], "operations": {}, "parents": {}}
        how = "distilled"
        for cluster in clusters:
            name = f"handle_{cluster}"
            parent, parent_version, front = _parent_harness(ctx, cluster)
            start = next((s for s in parent.skills if s.name == name), None) or skills.get(name)
            playbook = Playbook.from_skill(start.instructions if start else "")
            evidence = gather_evidence(ctx, [cluster])
            ops, how = write_edits(
                self.model,
                playbook,
                f"The agent fails on tasks of the cluster '{cluster}'. Improve its skill for that cluster.",
                evidence,
                distill_instructions(evidence, cluster),
            )
            if not ops and (start is None or start.instructions == playbook.render_skill()):
                continue
            skills[name] = Skill(
                name=name,
                description=f"How to handle {cluster.replace('_', ' ')} tasks.",
                instructions=playbook.render_skill(),
                applies_to=[cluster],
            )
            changes["clusters"].append(cluster)
            changes["operations"][cluster] = ops
            changes["parents"][cluster] = parent_version
            changes["front"] = front
        if not changes["clusters"]:
            raise LeverUnavailable(f"no failure evidence to distill for {clusters}")
        candidate = harness.model_copy(update={"skills": list(skills.values())})
        written = changes["clusters"]
        return HarnessCandidate(candidate, f"skill ({how}): handle_{', handle_'.join(written)}", changes)


class PromptEvolver:
    lever = Lever.prompt

    def __init__(self, model: EvolverModel | None = None) -> None:
        self.model = model

    def propose(self, ctx: EvolveContext, proposal: Proposal) -> HarnessCandidate:
        evidence = gather_evidence(ctx, None, max_runs=16)
        harness = ctx.active_harness
        parent, parent_version, front = _parent_harness(ctx, None)
        own = Playbook.from_prompt(harness.system_prompt, RULES_HEADER)
        playbook = Playbook(own.base, Playbook.from_prompt(parent.system_prompt, RULES_HEADER).items)
        playbook.extend(own.items)  # the active version's rules stay
        fallback = _hints(evidence["labels"]) + [f"Feedback on failed runs: {t}" for t in evidence["feedback"][:2]]
        ops, how = write_edits(
            self.model,
            playbook,
            "The agent fails across many task clusters. Improve the rules of its system prompt.",
            evidence,
            fallback,
        )
        prompt = playbook.render_prompt(RULES_HEADER)
        if prompt == harness.system_prompt:
            raise LeverUnavailable("nothing new to add to the prompt's rules from this evidence")
        candidate = harness.model_copy(update={"system_prompt": prompt})
        changes = {"labels": evidence["labels"], "operations": ops, "parent": parent_version, "front": front}
        return HarnessCandidate(candidate, f"prompt ({how})", changes)
