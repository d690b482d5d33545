"""The action format: one JSON object per turn, `{"tool": "<name>", "args": {...}}`.

A 135M model rarely writes perfect JSON, so parsing forgives the near-misses it does
make: code fences, text around the object, single quotes or Python literals, an object
cut off by the token limit, `{"name", "arguments"}` (OpenAI style), arguments at the top
level, and `tool(arg="x")` call syntax. Plain prose with no attempt at an object is the
agent's final answer to the customer, as in OpenAI tool calling where a message without
tool calls ends the turn.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from typing import Any

from evolvable.workloads.support_desk.backoffice import TOOL_NAMES


@dataclass(frozen=True)
class Action:
    tool: str
    args: dict[str, Any] = field(default_factory=dict)
    implicit_reply: bool = False
    """True when prose was taken as reply_to_customer."""

    def to_json(self) -> str:
        return json.dumps({"tool": self.tool, "args": self.args}, ensure_ascii=False)


class ActionParseError(ValueError):
    """The output tried to be an action but could not be read as one."""


_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)(?:```|$)", re.DOTALL)
_CALL = re.compile(r"\b(" + "|".join(TOOL_NAMES) + r")\s*\((.*?)\)", re.DOTALL)
_KWARG = re.compile(r"(\w+)\s*=\s*(\"[^\"]*\"|'[^']*'|[^,]+)")
_TRUNCATED_MESSAGE = re.compile(
    r"""["']tool["']\s*:\s*["']reply_to_customer["'].*?["']message["']\s*:\s*["'](.*)""", re.S
)


def parse_action(text: str) -> Action:
    """Read one action from a model output, or raise ActionParseError."""
    stripped = text.strip()
    if not stripped:
        raise ActionParseError("empty output")
    fenced = _FENCE.search(stripped)
    body = fenced.group(1).strip() if fenced else stripped
    if "{" in body:
        obj = _first_object(body)
        if obj is None:
            truncated = _TRUNCATED_MESSAGE.search(body)
            if truncated and truncated.group(1).strip():
                message = truncated.group(1).rstrip().rstrip("\"'}").rstrip()
                return Action("reply_to_customer", {"message": message})
            raise ActionParseError("could not read a JSON object")
        return _from_object(obj)
    call = _CALL.search(body)
    if call:
        return Action(call.group(1), _kwargs(call.group(1), call.group(2)))
    if any(name in body for name in TOOL_NAMES):
        raise ActionParseError("names a tool but is not a JSON action")
    return Action("reply_to_customer", {"message": stripped}, implicit_reply=True)


def _first_object(text: str) -> dict[str, Any] | None:
    """The first balanced {...} that parses as JSON or as a Python literal."""
    start = text.find("{")
    while start != -1:
        depth, in_str, quote, escaped = 0, False, "", False
        for i in range(start, len(text)):
            ch = text[i]
            if in_str:
                if escaped:
                    escaped = False
                elif ch == "\\":
                    escaped = True
                elif ch == quote:
                    in_str = False
            elif ch in "\"'":
                in_str, quote = True, ch
            elif ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    obj = _loads(text[start : i + 1])
                    if isinstance(obj, dict):
                        return obj
                    break
        start = text.find("{", start + 1)
    return None


def _loads(candidate: str) -> Any:
    try:
        return json.loads(candidate)
    except ValueError:
        pass
    try:
        pythonish = re.sub(r"\btrue\b", "True", re.sub(r"\bfalse\b", "False", re.sub(r"\bnull\b", "None", candidate)))
        value = ast.literal_eval(pythonish)
        json.dumps(value)  # `...`, sets, bytes, complex numbers: Python, not an action a tool step can record
        return value
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None


def _from_object(obj: dict[str, Any]) -> Action:
    tool = obj.get("tool") or obj.get("name") or obj.get("action") or obj.get("function")
    if isinstance(tool, dict):  # {"function": {"name", "arguments"}}
        obj, tool = tool, tool.get("name")
    if not isinstance(tool, str) or not tool.strip():
        raise ActionParseError('the object has no "tool" name')
    args: Any = obj.get("args", obj.get("arguments", obj.get("parameters")))
    if isinstance(args, str):
        parsed = _loads(args)
        args = parsed if isinstance(parsed, dict) else {}
    if args is None:  # arguments written at the top level
        args = {k: v for k, v in obj.items() if k not in ("tool", "name", "action", "function")}
    if not isinstance(args, dict):
        raise ActionParseError('"args" must be an object')
    return Action(tool.strip(), args)


def _kwargs(tool: str, raw: str) -> dict[str, Any]:
    args: dict[str, Any] = {}
    for key, value in _KWARG.findall(raw):
        args[key] = value.strip().strip("\"'")
    if not args and raw.strip():  # positional: lookup_order("12345")
        first = {"lookup_order": "order_id", "issue_refund": "order_id", "reset_password": "email"}
        first |= {"escalate": "reason", "reply_to_customer": "message"}
        if tool in first:
            args[first[tool]] = raw.strip().strip("\"'")
    return args
