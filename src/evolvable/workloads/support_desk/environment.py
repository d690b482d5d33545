"""One support-desk episode as an environment: model output in, observation out.

The agent loop and the verifiers' replay share this class, so a stored trajectory is
judged by exactly the code that produced its observations.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from evolvable.protocol.models import StrictModel
from evolvable.workloads.support_desk.actions import ActionParseError, parse_action
from evolvable.workloads.support_desk.backoffice import TERMINAL_TOOLS, BackOffice, ToolError
from evolvable.workloads.support_desk.tasks import Task

FORMAT_HINT = 'Answer with one JSON object, e.g. {"tool": "lookup_order", "args": {"order_id": "12345"}}'


class TurnRecord(StrictModel):
    """What happened in one turn: the model's raw output, the action read from it, and its result."""

    index: int
    output: str
    tool: str | None = None
    args: dict[str, Any] | None = None
    implicit_reply: bool = False
    status: Literal["ok", "error", "unparsed"]
    result: dict[str, Any] | None = None
    error_class: str | None = None
    error_message: str | None = None
    observation: str
    terminal: bool = False


class SupportDeskEnv:
    def __init__(self, task: Task) -> None:
        self.task = task
        self.office = BackOffice.for_task(task)
        self.turns: list[TurnRecord] = []
        self.done = False

    def step(self, output: str) -> TurnRecord:
        """Parse one model output, run the tool it names, and record the turn."""
        if self.done:
            raise RuntimeError("the episode has ended")
        index = len(self.turns)
        try:
            action = parse_action(output)
        except ActionParseError as err:
            record = TurnRecord(
                index=index,
                output=output,
                status="unparsed",
                error_class="FormatError",
                error_message=str(err),
                observation=f"Error: FormatError: {err}. {FORMAT_HINT}",
            )
            self.turns.append(record)
            return record
        try:
            result = self.office.call(action.tool, action.args)
        except ToolError as err:
            record = TurnRecord(
                index=index,
                output=output,
                tool=action.tool,
                args=action.args,
                implicit_reply=action.implicit_reply,
                status="error",
                error_class=type(err).__name__,
                error_message=str(err),
                observation=f"Error: {type(err).__name__}: {err}",
            )
        else:
            terminal = action.tool in TERMINAL_TOOLS
            self.done = terminal
            record = TurnRecord(
                index=index,
                output=output,
                tool=action.tool,
                args=action.args,
                implicit_reply=action.implicit_reply,
                status="ok",
                result=result,
                observation="Result: " + json.dumps(result, separators=(",", ":"), ensure_ascii=False),
                terminal=terminal,
            )
        self.turns.append(record)
        return record


def replay(task: Task, outputs: list[str], max_turns: int | None = None) -> list[TurnRecord]:
    """Run recorded model outputs through a fresh back office (stops at a terminal tool)."""
    env = SupportDeskEnv(task)
    for output in outputs[: max_turns if max_turns is not None else len(outputs)]:
        env.step(output)
        if env.done:
            break
    return env.turns
