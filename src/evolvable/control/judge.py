"""The judge: a model that scores finished sessions when the agent posts no outcome.

Runs of one cluster are scored together, relative to each other (RULER in OpenPipe ART: a judge
ranks a group of attempts at the same kind of task far more consistently than it scores one in
isolation). The scores become `judge` signals on the run and on the step the judge names as
decisive, with `source="judge:<model>"`, so they are never mistaken for posted outcomes; the
statistics use them only for runs without an outcome and say so (`RunSummary.success_source`).

Any OpenAI-compatible endpoint can judge (the embedded policy server by default). A reply that is
not the JSON asked for is retried once per run on its own, then skipped: a run the judge could not
score gets no signal rather than a made-up one.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from evolvable.control.model_call import chat
from evolvable.control.models import REPLAY_METADATA_KEY
from evolvable.protocol.models import LLMCallStep, Signal, SignalAttached, SignalKind, Trajectory, TrajectoryStatus
from evolvable.store import Store

log = logging.getLogger(__name__)

DEFAULT_RUBRIC = (
    "A run is good when the final answer fully and correctly accomplishes the user's request, uses tool "
    "results truthfully, and does nothing unsafe or unauthorised. A run is bad when it gives up, guesses, "
    "ignores a tool error, or answers something other than what was asked."
)
JUDGE_SYSTEM = "You are a strict, fair judge of AI agent runs."
SCORE_PREFILL = '{"score": '
ENDED = (TrajectoryStatus.completed, TrajectoryStatus.failed, TrajectoryStatus.abandoned)
MAX_TURN_CHARS = 600


class JudgeUnusable(Exception):
    """The judge model's reply is not the JSON asked for (or the call failed)."""


@dataclass
class JudgeScore:
    score: float
    """In [0, 1]: 1 fully accomplished, 0 failed."""
    reason: str = ""
    decisive_turn: int | None = None
    """1-based assistant turn the judge says decided the run, when it names one."""


@dataclass
class JudgeReport:
    judged: int = 0
    skipped: list[str] = field(default_factory=list)
    """'trajectory id: why' for runs the judge could not score."""


def _json_object(text: str) -> dict[str, Any]:
    match = re.search(r"\{.*\}", text, re.DOTALL)
    if not match:
        raise JudgeUnusable(f"no JSON object in the judge's reply: {text[:120]!r}")
    try:
        obj = json.loads(match.group(0))
    except json.JSONDecodeError as err:
        raise JudgeUnusable(f"judge reply is not valid JSON: {err}") from None
    if not isinstance(obj, dict):
        raise JudgeUnusable("judge reply is not a JSON object")
    return obj


def _score(obj: Any) -> JudgeScore:
    if not isinstance(obj, dict):
        raise JudgeUnusable("a score entry is not an object")
    value = obj.get("score")
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= float(value) <= 1.0:
        raise JudgeUnusable(f"score {value!r} is not a number in [0, 1]")
    turn = obj.get("decisive_turn")
    return JudgeScore(
        float(value),
        str(obj.get("reason") or obj.get("explanation") or "")[:300],
        turn if isinstance(turn, int) and not isinstance(turn, bool) and turn > 0 else None,
    )


def assistant_turns(t: Trajectory) -> list[tuple[LLMCallStep, str]]:
    """(step, answer text) for each llm_call with an answer, in order."""
    out = []
    for step in t.llm_calls():
        message = step.choices[0].message if step.choices else None
        if message is None:
            continue
        text = message.text()
        if message.tool_calls:
            text += " " + " ".join(f"{c.function.name}({c.function.arguments})" for c in message.tool_calls)
        out.append((step, text.strip()))
    return out


def transcript(t: Trajectory, task_text: str) -> str:
    """The task, then each assistant turn and the tool results that followed it, truncated."""
    lines = [f"Task: {task_text[:MAX_TURN_CHARS]}"]
    tools = t.tool_calls()
    for i, (step, text) in enumerate(assistant_turns(t), start=1):
        lines.append(f"Turn {i} (assistant): {text[:MAX_TURN_CHARS]}")
        for tool in (x for x in tools if x.llm_step_id == step.id):
            result = tool.error_message or json.dumps(tool.result, default=str)
            lines.append(f"  tool {tool.tool_name} -> {str(result)[:200]}")
    lines.append(f"Status: {t.status.value}")
    return "\n".join(lines)


class Judge:
    """Scores runs with a judge model; `rubric` is the default, `rubrics` per agent override it."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        rubric: str = DEFAULT_RUBRIC,
        *,
        rubrics: Mapping[str, str] | None = None,
        timeout_s: float = 120.0,
        max_tokens: int = 300,
        group_size: int = 6,
        max_per_tick: int = 48,
        prefill: bool = False,
    ) -> None:
        self.base_url = base_url
        self.model = model
        self.api_key = api_key or "not-needed"
        self.rubric = rubric or DEFAULT_RUBRIC
        self.rubrics = dict(rubrics or {})
        self.timeout_s = timeout_s
        self.max_tokens = max_tokens
        self.group_size = group_size
        self.max_per_tick = max_per_tick
        self.prefill = prefill
        """Start the JSON answer for the model (small models; needs vLLM's continue_final_message)."""

    @property
    def source(self) -> str:
        return f"judge:{self.model}"

    def rubric_for(self, agent: str) -> str:
        return self.rubrics.get(agent, self.rubric)

    def complete(self, system: str, prompt: str, prefill: str | None = None) -> str:
        try:
            return chat(
                self.base_url,
                self.model,
                self.api_key,
                system,
                prompt,
                timeout_s=self.timeout_s,
                max_tokens=self.max_tokens,
                prefill=prefill if self.prefill else None,
            )
        except Exception as err:  # any transport or API failure: the run stays unjudged
            raise JudgeUnusable(f"judge call failed: {type(err).__name__}: {err}") from err

    def _scored(self, system: str, prompt: str) -> JudgeScore:
        """A single score: the JSON asked for, or with a prefill the number the model continued it with."""
        text = self.complete(system, prompt, SCORE_PREFILL)
        try:
            return _score(_json_object(text))
        except JudgeUnusable:
            if not self.prefill or not text.startswith(SCORE_PREFILL):
                raise
        match = re.match(r"\s*(1(?:\.0+)?|0(?:\.\d+)?)\b(.*)", text[len(SCORE_PREFILL) :], re.DOTALL)
        if match is None:
            raise JudgeUnusable(f"judge continued the score with {text[len(SCORE_PREFILL) :][:60]!r}")
        reason = re.sub(r'^[\s,"]*(reason"?\s*:\s*"?)?', "", match.group(2)).split('"')[0].strip()
        return JudgeScore(float(match.group(1)), reason[:300])

    # ------------------------------------------------------------------ scoring

    def rank(self, agent: str, transcripts: Sequence[str]) -> list[JudgeScore]:
        """RULER-style: all runs of one cluster in one prompt, each scored relative to the others.

        With a prefill the model scores one run per call, still seeing all of them (the shared prefix
        is cached by the policy server), since a small model cannot write the whole list."""
        runs = "\n\n".join(f"### Run {i}\n{text}" for i, text in enumerate(transcripts, start=1))
        if self.prefill:
            return [
                self._scored(
                    JUDGE_SYSTEM,
                    f"Rubric: {self.rubric_for(agent)}\n\nThese {len(transcripts)} runs attempt the same kind of "
                    f"task.\n\n{runs}\n\nCompared with the others, score run {k} from 0 (failed) to 1 (fully "
                    'accomplished). Answer with JSON only: {"score": 0.0, "reason": "..."}',
                )
                for k in range(1, len(transcripts) + 1)
            ]
        prompt = (
            f"Rubric: {self.rubric_for(agent)}\n\nThese {len(transcripts)} runs attempt the same kind of task. "
            "Compare them and score each from 0 (failed) to 1 (fully accomplished); better runs score higher.\n\n"
            f"{runs}\n\nAnswer with JSON only: "
            '{"scores": [{"run": 1, "score": 0.0, "reason": "...", "decisive_turn": 1}, ...]} with one entry per run.'
        )
        obj = _json_object(self.complete(JUDGE_SYSTEM, prompt))
        entries = obj.get("scores")
        if not isinstance(entries, list) or len(entries) != len(transcripts):
            got = len(entries) if isinstance(entries, list) else 0
            raise JudgeUnusable(f"judge scored {got} of {len(transcripts)} runs")
        by_run = {e.get("run"): e for e in entries if isinstance(e, dict)}
        if set(by_run) == set(range(1, len(transcripts) + 1)):
            return [_score(by_run[i]) for i in range(1, len(transcripts) + 1)]
        return [_score(e) for e in entries]

    def score_one(self, agent: str, text: str) -> JudgeScore:
        prompt = (
            f"Rubric: {self.rubric_for(agent)}\n\n{text}\n\nScore this run from 0 (failed) to 1 (fully accomplished). "
            'Answer with JSON only: {"score": 0.0, "reason": "...", "decisive_turn": 1}'
        )
        return self._scored(JUDGE_SYSTEM, prompt)

    def compare(self, agent: str, context: str, reference: str, reference_ok: bool | None, answer: str) -> JudgeScore:
        """Is `answer` (a candidate's reply to a recorded turn) good, given the recorded reply and how the run ended?"""
        verdict = {True: "the recorded run succeeded", False: "the recorded run failed", None: "unknown outcome"}
        prompt = (
            f"Rubric: {self.rubric_for(agent)}\n\nConversation so far:\n{context}\n\n"
            f"Recorded reply ({verdict[reference_ok]}): {reference[:MAX_TURN_CHARS]}\n\n"
            f"New reply: {answer[:MAX_TURN_CHARS]}\n\n"
            "Score the new reply from 0 (wrong or worse than a failed recorded reply) to 1 (accomplishes this "
            "turn at least as well as a successful recorded reply). "
            'Answer with JSON only: {"score": 0.0, "reason": "..."}'
        )
        return self._scored(JUDGE_SYSTEM, prompt)

    def score_group(self, agent: str, transcripts: Sequence[str]) -> list[JudgeScore | JudgeUnusable]:
        """Relative scores for the group; when the group reply is unusable, each run on its own."""
        if len(transcripts) > 1:
            try:
                return list(self.rank(agent, transcripts))
            except JudgeUnusable as err:
                log.info("group judging failed (%s); scoring runs one by one", err)
        out: list[JudgeScore | JudgeUnusable] = []
        for text in transcripts:
            try:
                out.append(self.score_one(agent, text))
            except JudgeUnusable as err:
                out.append(err)
        return out

    # ------------------------------------------------------------------ sessions -> signals

    def signals_for(self, t: Trajectory, score: JudgeScore, group: int) -> list[Signal]:
        meta = {"reason": score.reason, "group_size": group, "rubric": _digest(self.rubric_for(t.agent))}
        label = "judged_success" if score.score >= 0.5 else "judged_failure"
        out = [Signal(kind=SignalKind.judge, value=score.score, label=label, source=self.source, metadata=meta)]
        turns = assistant_turns(t)
        if score.decisive_turn is not None and score.decisive_turn <= len(turns):
            step = turns[score.decisive_turn - 1][0]
            out.append(
                Signal(
                    kind=SignalKind.judge,
                    value=score.score,
                    step_id=step.id,
                    label=f"decisive_{label}",
                    source=self.source,
                    metadata=meta,
                )
            )
        return out

    def judge_pending(
        self, store: Store, agent: str, *, tenant_id: str | None = None, window: int = 300
    ) -> JudgeReport:
        """Score the agent's ended or abandoned runs that carry no judge signal yet, cluster by cluster."""
        from evolvable.control.statistics import task_text_of
        from evolvable.store import TrajectoryFilter

        headers, _ = store.list_trajectories(
            TrajectoryFilter(agent=agent, tenant_id=tenant_id, status=[s.value for s in ENDED]), limit=window
        )
        pending: dict[str, list[Trajectory]] = {}
        count = 0
        for header in headers:
            if count >= self.max_per_tick or REPLAY_METADATA_KEY in header.metadata:
                continue
            t = store.get_trajectory(header.id)
            if any(s.kind == SignalKind.judge for s in t.signals) or not assistant_turns(t):
                continue
            cluster = str(t.metadata.get("cluster") or t.metadata.get("intent") or "all")
            pending.setdefault(cluster, []).append(t)
            count += 1
        report = JudgeReport()
        for runs in pending.values():
            for start in range(0, len(runs), self.group_size):
                group = runs[start : start + self.group_size]
                scores = self.score_group(agent, [transcript(t, task_text_of(t)) for t in group])
                events = []
                for t, score in zip(group, scores, strict=True):
                    if isinstance(score, JudgeUnusable):
                        report.skipped.append(f"{t.id}: {score}")
                        continue
                    for sig in self.signals_for(t, score, len(group)):
                        sig.id = f"sig_judge_{_digest(t.id + (sig.step_id or ''))}"
                        events.append(
                            SignalAttached(
                                event_id=f"{t.id}:{sig.id}", trajectory_id=t.id, tenant_id=t.tenant_id, signal=sig
                            )
                        )
                    report.judged += 1
                if events:
                    store.apply_events(events)
        return report


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def judge_from_settings(settings: Mapping[str, Any]) -> Judge:
    """A judge from plain configuration: base_url, model, api_key, rubric, rubrics (per agent), timeout_s,
    prefill, max_tokens."""
    try:
        base_url, model = str(settings["base_url"]), str(settings["model"])
    except KeyError as err:
        raise ValueError(f"judge settings need {err.args[0]!r}") from None
    return Judge(
        base_url,
        model,
        settings.get("api_key"),
        settings.get("rubric") or DEFAULT_RUBRIC,
        rubrics=settings.get("rubrics"),
        timeout_s=float(settings.get("timeout_s", 120.0)),
        prefill=bool(settings.get("prefill", False)),
        max_tokens=int(settings.get("max_tokens") or 300),
    )


def judge_agreement(runs: Sequence[Any], threshold: float = 0.5) -> dict[str, Any]:
    """How often the judge's verdict matches the posted outcome, on runs that have both.

    `runs` are `RunSummary`s; `reward` holds the posted outcome and `judge_score` the judge's. Also
    counts which source decided success, so a status page shows how much rests on the judge alone.
    """
    both = [r for r in runs if r.reward is not None and r.judge_score is not None]
    agree = sum(1 for r in both if (r.reward >= threshold) == (r.judge_score >= threshold))
    sources: dict[str, int] = {}
    for r in runs:
        key = r.success_source or "none"
        sources[key] = sources.get(key, 0) + 1
    return {
        "judged": sum(1 for r in runs if r.judge_score is not None),
        "with_outcome": len(both),
        "agreement": round(agree / len(both), 3) if both else None,
        "success_sources": sources,
    }
