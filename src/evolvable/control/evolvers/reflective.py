"""Skills and prompt: reflective edits from failure evidence.

With an evolver model configured (any OpenAI-compatible endpoint; in production a stronger model
than the agent's) the edit is written by that model from the evidence. Without one, or when its
answer is unusable, a deterministic distillation writes it: the tool sequence that successful runs
of the cluster followed, plus the verifiers' own feedback on the failing runs. The distillation
works with the embedded model and never invents policy (it only restates what verifiers said).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from evolvable.control.decision import Proposal
from evolvable.control.evolvers import EvolveContext, HarnessCandidate, LeverUnavailable
from evolvable.control.models import Lever
from evolvable.control.statistics import RunSummary
from evolvable.errors import NotFound
from evolvable.protocol.harness import Skill
from evolvable.protocol.models import SignalKind, StepStatus

LABEL_HINTS = {
    "wrong_tool": "Pick the tool that matches the request before replying.",
    "bad_arguments": "Copy order ids and emails exactly from the ticket into the tool arguments.",
    "invalid_arguments": "Copy order ids and emails exactly from the ticket into the tool arguments.",
    "tool_error": "Check the tool result; if it reports an error, fix the arguments instead of guessing.",
    "policy_violation": "Follow the policy strictly; when a request is outside it, refuse politely.",
    "no_reply": "Always finish with a reply to the customer.",
    "parse_error": 'Answer with exactly one JSON object {"tool": ..., "args": {...}} per turn.',
    "format_error": 'Answer with exactly one JSON object {"tool": ..., "args": {...}} per turn.',
    "redundant": "Do not repeat a tool call you already made; use its result.",
    "safety_violation": "Never reveal another customer's data or internal secrets; refuse such requests.",
    "failure": "",
}
RULES_HEADER = "Rules learned from experience:"


@dataclass
class EvolverModel:
    """An OpenAI-compatible endpoint that writes edits (e.g. a stronger model than the agent's)."""

    base_url: str
    model: str
    api_key: str = "not-needed"
    timeout_s: float = 60.0
    max_tokens: int = 400

    def complete(self, prompt: str) -> str:
        from openai import OpenAI

        client = OpenAI(base_url=self.base_url, api_key=self.api_key, timeout=self.timeout_s, max_retries=1)
        reply = client.chat.completions.create(
            model=self.model,
            messages=[
                {"role": "system", "content": "You improve the instructions of a customer-support agent."},
                {"role": "user", "content": prompt},
            ],
            temperature=0.0,
            max_tokens=self.max_tokens,
        )
        return reply.choices[0].message.content or ""


def _hint(label: str) -> str:
    if label.startswith("unmet:"):
        return f"The task is only done when this holds: {label.removeprefix('unmet:').replace('_', ' ')}."
    return LABEL_HINTS.get(label, f"Avoid this failure: {label.replace('_', ' ')}.")


def _hints(labels: dict[str, int]) -> list[str]:
    """One sentence for the unmet verifier checks, then one hint per other failure label."""
    unmet = [label.removeprefix("unmet:").replace("_", " ") for label in labels if label.startswith("unmet:")]
    hints = [f"The task is only done when: {', '.join(unmet)}."] if unmet else []
    return hints + [h for h in (_hint(label) for label in labels if not label.startswith("unmet:")) if h]


def gather_evidence(ctx: EvolveContext, clusters: list[str] | None, max_runs: int = 8) -> dict[str, Any]:
    """Verifier feedback on failing runs and the tool sequences of successful runs."""

    def pick(runs: list[RunSummary]) -> list[RunSummary]:
        return [r for r in runs if clusters is None or r.cluster in clusters][-max_runs:]

    feedback: Counter[str] = Counter()
    labels: Counter[str] = Counter()
    for run in pick([r for r in ctx.runs if r.success is False]):
        labels.update(set(run.failure_labels))
        try:
            t = ctx.store.get_trajectory(run.trajectory_id)
        except NotFound:
            continue
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
    }


def distill_instructions(evidence: dict[str, Any], cluster: str | None) -> list[str]:
    lines: list[str] = []
    seq = evidence["sequences"].get(cluster) if cluster else None
    if seq:
        lines.append("Successful runs did: " + " -> ".join(seq) + ".")
    lines += _hints(evidence["labels"])
    lines += [f"Verifier feedback: {text}" for text in evidence["feedback"][:2]]
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
        written: list[str] = []
        how = "distilled"
        for cluster in clusters:
            evidence = gather_evidence(ctx, [cluster])
            instructions, how = self._write(cluster, evidence, skills.get(f"handle_{cluster}"))
            if not instructions:
                continue
            skills[f"handle_{cluster}"] = Skill(
                name=f"handle_{cluster}",
                description=f"How to handle {cluster.replace('_', ' ')} requests.",
                instructions=instructions,
                applies_to=[cluster],
            )
            written.append(cluster)
        if not written:
            raise LeverUnavailable(f"no failure evidence to distill for {clusters}")
        candidate = harness.model_copy(update={"skills": list(skills.values())})
        return HarnessCandidate(candidate, f"skill ({how}): handle_{', handle_'.join(written)}", {"clusters": written})

    def _write(self, cluster: str, evidence: dict[str, Any], existing: Skill | None) -> tuple[str, str]:
        if self.model is not None:
            prompt = (
                f"The agent keeps failing on '{cluster}' tickets.\nEvidence (JSON): {json.dumps(evidence)}\n"
                f"Current skill: {existing.instructions if existing else '(none)'}\n"
                'Write a short, concrete skill. Answer with JSON {"instructions": "..."} only.'
            )
            try:
                obj = _json_object(self.model.complete(prompt))
                if obj and isinstance(obj.get("instructions"), str) and obj["instructions"].strip():
                    return obj["instructions"].strip(), f"written by {self.model.model}"
            except Exception:  # any evolver-model failure falls back to distillation
                pass
        return " ".join(distill_instructions(evidence, cluster)), "distilled"


class PromptEvolver:
    lever = Lever.prompt

    def __init__(self, model: EvolverModel | None = None) -> None:
        self.model = model

    def propose(self, ctx: EvolveContext, proposal: Proposal) -> HarnessCandidate:
        evidence = gather_evidence(ctx, None, max_runs=16)
        harness = ctx.active_harness
        base = harness.system_prompt.split(RULES_HEADER)[0].rstrip()
        prompt, how = None, "distilled"
        if self.model is not None:
            request = (
                f"Current system prompt:\n{harness.system_prompt}\n\nFailure evidence (JSON): {json.dumps(evidence)}\n"
                'Rewrite the system prompt to prevent these failures. Answer with JSON {"system_prompt": "..."} only.'
            )
            try:
                obj = _json_object(self.model.complete(request))
                if obj and isinstance(obj.get("system_prompt"), str) and obj["system_prompt"].strip():
                    prompt, how = obj["system_prompt"].strip(), f"written by {self.model.model}"
            except Exception:  # fall back to distillation
                prompt = None
        if prompt is None:
            rules = _hints(evidence["labels"])
            rules += [f"Verifier feedback: {text}" for text in evidence["feedback"][:2]]
            if not rules:
                raise LeverUnavailable("no failure evidence to distill into the prompt")
            prompt = base + "\n\n" + RULES_HEADER + "\n" + "\n".join(f"- {r}" for r in dict.fromkeys(rules))
        candidate = harness.model_copy(update={"system_prompt": prompt})
        return HarnessCandidate(candidate, f"prompt ({how})", {"labels": evidence["labels"]})
