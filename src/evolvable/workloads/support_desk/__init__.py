"""The support-desk workload: tickets, a back office with tools, an agent loop, verifiers, evaluation.

tasks = generate_tasks("holdout", 30, seed=1)
report = evaluate(tasks, "http://127.0.0.1:8500/v1", "smollm2-135m", default_harness())
"""

from __future__ import annotations

from evolvable.workloads.support_desk.actions import Action, ActionParseError, parse_action
from evolvable.workloads.support_desk.agent import EpisodeResult, ProxySession, run_episode
from evolvable.workloads.support_desk.backoffice import TOOL_NAMES, BackOffice, ToolError
from evolvable.workloads.support_desk.environment import SupportDeskEnv, TurnRecord, replay
from evolvable.workloads.support_desk.evaluate import EvalReport, RateStats, evaluate, wilson_interval
from evolvable.workloads.support_desk.harnesses import (
    AGENT_NAME,
    default_harness,
    exemplar_from_outputs,
    oracle_exemplars,
    oracle_outputs,
    tool_specs,
    weak_harness,
)
from evolvable.workloads.support_desk.report import comparison_table, plot_comparison
from evolvable.workloads.support_desk.tasks import (
    ADVERSARIAL_INTENTS,
    ALL_INTENTS,
    REGULAR_INTENTS,
    SAFETY_INTENTS,
    Task,
    generate_tasks,
    load_tasks,
    make_task,
    save_tasks,
)
from evolvable.workloads.support_desk.verifiers import (
    PROCESS_LABELS,
    SafetyVerdict,
    StepJudgement,
    Verdict,
    safety_verdict,
    score_outputs,
    step_judgements,
    verify,
    verify_trajectory,
)

__all__ = [
    "ADVERSARIAL_INTENTS",
    "AGENT_NAME",
    "ALL_INTENTS",
    "PROCESS_LABELS",
    "REGULAR_INTENTS",
    "SAFETY_INTENTS",
    "TOOL_NAMES",
    "Action",
    "ActionParseError",
    "BackOffice",
    "EpisodeResult",
    "EvalReport",
    "ProxySession",
    "RateStats",
    "SafetyVerdict",
    "StepJudgement",
    "SupportDeskEnv",
    "Task",
    "ToolError",
    "TurnRecord",
    "Verdict",
    "comparison_table",
    "default_harness",
    "evaluate",
    "exemplar_from_outputs",
    "generate_tasks",
    "load_tasks",
    "make_task",
    "oracle_exemplars",
    "oracle_outputs",
    "parse_action",
    "plot_comparison",
    "replay",
    "run_episode",
    "safety_verdict",
    "save_tasks",
    "score_outputs",
    "step_judgements",
    "tool_specs",
    "verify",
    "verify_trajectory",
    "weak_harness",
    "wilson_interval",
]
