"""ATDP -> Agent Data Protocol (ADP) JSON.

ADP is a flat sequence of actions (`api_action`, `code_action`, `message_action`) and
observations (`text_observation`, `web_observation`), each with an optional reward.
ATDP is richer (token ids, step-level signals, versions); what ADP has no field for
goes into `details` so nothing is silently lost.
"""

from __future__ import annotations

import json
from typing import Any

from evolvable.protocol.models import (
    HandoffStep,
    LLMCallStep,
    MemoryOpStep,
    MessageStep,
    SignalKind,
    SkillUseStep,
    ToolCallStep,
    Trajectory,
)

ADP_SCHEMA_VERSION = "1.2.0"


def _step_rewards(t: Trajectory) -> dict[str, float]:
    out: dict[str, float] = {}
    for sig in t.signals:
        if sig.step_id and sig.kind in (SignalKind.process, SignalKind.verifier, SignalKind.tool_error):
            out[sig.step_id] = out.get(sig.step_id, 0.0) + sig.value
    return out


def _with_reward(item: dict[str, Any], reward: float | None) -> dict[str, Any]:
    if reward is not None:
        item["reward"] = reward
    return item


def to_adp(t: Trajectory) -> dict[str, Any]:
    rewards = _step_rewards(t)
    content: list[dict[str, Any]] = []
    if t.task_input is not None:
        text = t.task_input if isinstance(t.task_input, str) else json.dumps(t.task_input)
        content.append({"class_": "text_observation", "content": text, "source": "user"})
    for step in t.steps:
        r = rewards.get(step.id)
        if isinstance(step, LLMCallStep):
            msg = step.response
            if msg is None:
                continue
            if msg.tool_calls:
                for call in msg.tool_calls:
                    try:
                        kwargs = json.loads(call.function.arguments or "{}")
                    except json.JSONDecodeError:
                        kwargs = {"_raw": call.function.arguments}
                    content.append(
                        _with_reward(
                            {
                                "class_": "api_action",
                                "function": call.function.name,
                                "kwargs": kwargs if isinstance(kwargs, dict) else {"_value": kwargs},
                                "description": msg.text() or None,
                            },
                            r,
                        )
                    )
            else:
                content.append(_with_reward({"class_": "message_action", "content": msg.text()}, r))
        elif isinstance(step, ToolCallStep):
            result = step.result if isinstance(step.result, str) else json.dumps(step.result)
            content.append(
                _with_reward(
                    {"class_": "text_observation", "content": result, "source": "environment", "name": step.tool_name},
                    r,
                )
            )
        elif isinstance(step, MessageStep):
            text = step.content if isinstance(step.content, str) else json.dumps(step.content)
            source = "user" if step.role == "user" else "environment"
            content.append(_with_reward({"class_": "text_observation", "content": text, "source": source}, r))
        elif isinstance(step, SkillUseStep | HandoffStep | MemoryOpStep):
            content.append(
                {
                    "class_": "text_observation",
                    "content": json.dumps(step.model_dump(mode="json", exclude={"metadata"})),
                    "source": "environment",
                    "name": step.kind,
                }
            )
    outcome = t.outcome()
    if outcome is not None and content:
        content[-1]["reward"] = outcome
    return {
        "schema_version": ADP_SCHEMA_VERSION,
        "id": t.id,
        "content": content,
        "details": {
            "atdp_schema_version": t.schema_version,
            "agent": t.agent,
            "tenant_id": t.tenant_id,
            "status": str(t.status),
            "harness_version": t.harness_version,
            "policy_version": t.policy_version,
            "task_id": t.task_id,
            "outcome": outcome,
            "signals": [s.model_dump(mode="json") for s in t.signals],
        },
    }
