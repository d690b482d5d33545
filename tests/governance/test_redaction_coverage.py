"""Every client-named field of an ATDP event goes through redaction (and the fail-closed markers), and audit
targets keep no raw end-user id. The end-to-end version through the proxy is tests/proxy/test_redaction_coverage.py."""

from __future__ import annotations

import urllib.parse
from typing import Any

from evolvable.governance.audit import pseudonym, safe_filter, safe_query_target
from evolvable.governance.capture import REDACTION_FAILED, mark_redaction_failed
from evolvable.governance.redaction import EventRedactor
from evolvable.protocol.models import (
    ChatMessage,
    CompletionChoice,
    FunctionCall,
    HandoffStep,
    LLMCallStep,
    MemoryOpStep,
    Signal,
    SignalAttached,
    SignalKind,
    SkillUseStep,
    StepAppended,
    ToolCall,
    ToolCallStep,
    TrajectoryHeader,
    TrajectoryStarted,
)

EMAIL = "dana.k@example.com"
PHONE = "+49 30 901820"


def _events() -> list[Any]:
    tid = "traj_ids"
    call_id = f"call:{EMAIL}"
    llm = LLMCallStep(
        agent=f"agent {EMAIL}",
        model=f"ft:{EMAIL}",
        request_messages=[
            ChatMessage(role="user", content="hi"),
            ChatMessage(role="tool", tool_call_id=call_id, content="ok"),
        ],
        choices=[
            CompletionChoice(
                message=ChatMessage(
                    role="assistant",
                    tool_calls=[ToolCall(id=call_id, function=FunctionCall(name=f"ring {PHONE}", arguments="{}"))],
                )
            )
        ],
        response_id=f"resp {EMAIL}",
    )
    steps = [
        llm,
        ToolCallStep(tool_name=f"ring {PHONE}", tool_call_id=call_id, error_class=f"Err {EMAIL}"),
        HandoffStep(from_agent=f"a {EMAIL}", to_agent=f"b {PHONE}"),
        MemoryOpStep(op="read", store=f"s {EMAIL}"),
        SkillUseStep(skill_name=f"skill {EMAIL}", skill_version=f"v {PHONE}"),
    ]
    header = TrajectoryHeader(id=tid, agent=f"desk {EMAIL}", task_id=f"task {PHONE}")
    return [
        TrajectoryStarted(trajectory_id=tid, header=header),
        *(StepAppended(trajectory_id=tid, step=s) for s in steps),
        SignalAttached(trajectory_id=tid, signal=Signal(kind=SignalKind.verifier, value=1.0, source=EMAIL)),
    ]


def _dump(events: list[Any]) -> str:
    return "".join(e.model_dump_json() for e in events)


def test_identifier_fields_are_redacted_and_links_survive() -> None:
    events = _events()
    assert EMAIL in _dump(events) and PHONE in _dump(events)
    out = EventRedactor().redact_events(events)
    assert EMAIL not in _dump(out) and PHONE not in _dump(out)
    header = out[0].header
    assert (header.agent, header.task_id) == ("desk <EMAIL_1>", "task <PHONE_1>")
    llm, tool = out[1].step, out[2].step
    assert llm.agent == "agent <EMAIL_1>" and llm.model == "ft:<EMAIL_1>"
    requested = llm.choices[0].message.tool_calls[0]
    # the same raw id maps to the same placeholder: the tool step still links to the call that requested it
    assert requested.id == tool.tool_call_id == llm.request_messages[1].tool_call_id == "call:<EMAIL_1>"
    assert requested.function.name == tool.tool_name == "ring <PHONE_1>"
    assert out[-1].signal.source == "<EMAIL_1>"


def test_ordinary_identifiers_are_kept_byte_for_byte() -> None:
    step = ToolCallStep(tool_name="lookup_order", tool_call_id="call_8f3a9c1d2e", error_class="KeyError")
    signal = Signal(kind=SignalKind.verifier, value=1.0, source="judge:gpt-4o-2024-08-06")
    out = EventRedactor().redact_events(
        [StepAppended(trajectory_id="t", step=step), SignalAttached(trajectory_id="t", signal=signal)]
    )
    assert out[0].step == step and out[1].signal == signal


def test_fail_closed_markers_cover_identifiers() -> None:
    marked = [mark_redaction_failed(e) for e in _events()]
    dumped = _dump(marked)
    assert EMAIL not in dumped and PHONE not in dumped
    assert marked[-1].signal.source == REDACTION_FAILED
    assert marked[2].step.tool_call_id == REDACTION_FAILED


def test_audit_query_targets_keep_digests_of_users_only() -> None:
    target = safe_query_target(urllib.parse.urlencode({"end_user": EMAIL, "limit": 5, "q": f"call {PHONE}"}))
    assert EMAIL not in target and "30 901820" not in target and "30+901820" not in target
    assert target.startswith(f"end_user={pseudonym(EMAIL)}&limit=5&q=call")
    assert safe_filter({"end_user": ["bob", 3], "agent": "desk"}) == {
        "end_user": [pseudonym("bob"), 3],
        "agent": "desk",
    }
