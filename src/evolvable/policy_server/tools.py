"""Function tools for chat models whose chat template has no tool section (SmolLM2's has none).

Rendering follows the Hermes convention that Qwen2.5 and Hermes-2-Pro templates use: tool signatures
in a `<tools></tools>` block of the system prompt, calls as `<tool_call>{"name", "arguments"}</tool_call>`
in the assistant's text, results as `<tool_response>` in a `tool` turn. Parsing follows vLLM's
`--tool-call-parser hermes`: the text outside `<tool_call>` blocks is the content; each block is one
call; when a block is not a JSON object with a name, the whole answer stays text (`tool_choice: auto`).

`tool_choice`: `none` renders no tools and parses nothing; `auto` lets the model decide; `required`
and a named function prefill the opening of a call after the assistant prompt, so the model continues
inside it (a named function's prefill includes the name, and generation stops after one call).
"""

from __future__ import annotations

import contextlib
import json
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from evolvable.errors import HTTPError, InvalidRequest

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)

TOOLS_PROMPT = """# Tools

You may call one or more functions to assist with the user query.

You are provided with function signatures within <tools></tools> XML tags:
<tools>
{signatures}
</tools>

For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:
<tool_call>
{{"name": <function-name>, "arguments": <args-json-object>}}
</tool_call>"""


class ToolRequestError(InvalidRequest, ValueError):
    """A tools request this server cannot honour as asked (answered 400, never ignored)."""


class ToolOutputError(HTTPError, RuntimeError):
    """`tool_choice` required a call and the model's output holds none that parses (answered 500)."""

    status = 500
    error_type = "server_error"
    code = "tool_call_parse_error"


@dataclass(frozen=True)
class ToolChoice:
    """The request's `tool_choice`, resolved against its `tools`."""

    mode: Literal["none", "auto", "required", "named"]
    name: str | None = None
    parallel: bool = True
    names: tuple[str, ...] = ()
    """The offered functions: a forced call must name one of them."""

    @property
    def forced(self) -> bool:
        return self.mode in ("required", "named")

    @property
    def active(self) -> bool:
        """Whether tools are rendered into the prompt and calls parsed from the output."""
        return self.mode != "none"

    @property
    def prefill(self) -> str:
        """Text placed at the start of the assistant's turn, so the answer begins inside a call."""
        if self.mode == "named":
            return f'{OPEN}\n{{"name": {json.dumps(self.name)}, "arguments": '
        return f"{OPEN}\n" if self.mode == "required" else ""

    @property
    def stops_after_one_call(self) -> bool:
        return self.active and (self.mode == "named" or not self.parallel)


def resolve_tool_choice(tools: Sequence[Any] | None, tool_choice: Any, parallel_tool_calls: bool | None) -> ToolChoice:
    """Check `tools` and `tool_choice` the way OpenAI does; anything this server cannot do raises ToolRequestError."""
    names = [_function_name(i, tool) for i, tool in enumerate(tools or [])]
    if len(set(names)) != len(names):
        raise ToolRequestError("tools: function names must be unique")
    parallel = True if parallel_tool_calls is None else parallel_tool_calls
    offered = tuple(names)
    if tool_choice is None:
        return ToolChoice("auto" if names else "none", parallel=parallel, names=offered)
    if tool_choice in ("none", "auto", "required"):
        if tool_choice != "none" and not names:
            raise ToolRequestError(f"tool_choice {tool_choice!r} needs at least one tool in `tools`")
        if tool_choice == "required" and len(names) == 1:  # the same promise, and the prefill can name it
            return ToolChoice("named", name=names[0], parallel=parallel, names=offered)
        return ToolChoice(tool_choice, parallel=parallel, names=offered)
    if isinstance(tool_choice, Mapping) and tool_choice.get("type") == "function":
        name = (tool_choice.get("function") or {}).get("name")
        if name not in names:
            raise ToolRequestError(f"tool_choice names function {name!r}, which is not in `tools`")
        return ToolChoice("named", name=name, parallel=parallel, names=offered)
    raise ToolRequestError(
        "tool_choice must be 'none', 'auto', 'required' or {'type': 'function', 'function': {'name': ...}}"
    )


def _function_name(index: int, tool: Any) -> str:
    if not isinstance(tool, Mapping) or tool.get("type") != "function":
        kind = tool.get("type") if isinstance(tool, Mapping) else type(tool).__name__
        raise ToolRequestError(f"tools[{index}]: only function tools are supported, not {kind!r}")
    function = tool.get("function")
    if not isinstance(function, Mapping) or not isinstance(function.get("name"), str) or not function["name"]:
        raise ToolRequestError(f"tools[{index}].function.name: a non-empty string is required")
    parameters = function.get("parameters")
    if parameters is not None and not isinstance(parameters, Mapping):
        raise ToolRequestError(f"tools[{index}].function.parameters: must be a JSON Schema object")
    return str(function["name"])


# ----------------------------------------------------------------- rendering


def render_messages(
    messages: Sequence[dict[str, Any]], tools: Sequence[Any] | None, choice: ToolChoice
) -> list[dict[str, Any]]:
    """Messages a tool-less template can render: the tools block joins the system prompt, earlier calls and
    results become Hermes-tagged text."""
    rendered = [_render_message(m) for m in messages]
    if not (choice.active and tools):
        return rendered
    block = TOOLS_PROMPT.format(signatures="\n".join(json.dumps(t, ensure_ascii=False) for t in tools))
    if rendered and rendered[0].get("role") == "system":
        return [{**rendered[0], "content": f"{rendered[0]['content']}\n\n{block}"}, *rendered[1:]]
    return [{"role": "system", "content": block}, *rendered]


def _render_message(message: dict[str, Any]) -> dict[str, Any]:
    role = message.get("role")
    if role == "assistant" and message.get("tool_calls"):
        calls = [_render_call(call) for call in message["tool_calls"]]
        text = "\n".join(part for part in (message.get("content") or "", *calls) if part)
        return {"role": "assistant", "content": text}
    if role == "tool":
        return {"role": "tool", "content": f"<tool_response>\n{message.get('content') or ''}\n</tool_response>"}
    return message


def _render_call(call: Any) -> str:
    function = call.get("function") if isinstance(call, Mapping) else None
    if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
        raise ToolRequestError("assistant tool_calls need function.name")
    arguments: Any = function.get("arguments") or "{}"
    if isinstance(arguments, str):
        with contextlib.suppress(json.JSONDecodeError):  # else kept as the string the model produced
            arguments = json.loads(arguments)
    return f"{OPEN}\n{json.dumps({'name': function['name'], 'arguments': arguments}, ensure_ascii=False)}\n{CLOSE}"


# ----------------------------------------------------------------- parsing


@dataclass
class ParsedAnswer:
    content: str | None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def tool_call(name: str, arguments: str) -> dict[str, Any]:
    """One OpenAI `tool_calls` entry."""
    return {"id": new_call_id(), "type": "function", "function": {"name": name, "arguments": arguments}}


def parse_call(block: str) -> tuple[str, str] | None:
    """(name, arguments as JSON text) of one `<tool_call>` body, or None if it is not a call."""
    try:
        payload = json.loads(block)
    except json.JSONDecodeError:
        return None
    if not isinstance(payload, dict) or not isinstance(payload.get("name"), str) or not payload["name"]:
        return None
    arguments = payload.get("arguments", payload.get("parameters", {}))
    return payload["name"], arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)


def parse_answer(text: str, choice: ToolChoice) -> ParsedAnswer:
    """Split a generated answer (after the choice's prefill) into content and tool calls: vLLM's hermes
    parser, non-streaming. A forced choice (`required`, named) without a parseable call raises ToolOutputError."""
    parsed = _parse_hermes(choice.prefill + text)
    if not choice.forced:
        return parsed
    if not parsed.tool_calls:
        block = _BLOCK.search(choice.prefill + text)
        arguments = lenient_arguments(block.group(1)) if block and choice.name else None
        if arguments is not None and choice.name:
            parsed = ParsedAnswer(None, [tool_call(choice.name, arguments)])
    check_forced(choice, [c["function"]["name"] for c in parsed.tool_calls], text)
    return parsed


def check_forced(choice: ToolChoice, names: Sequence[str], text: str) -> None:
    """A forced choice needs at least one call, each to an offered function (OpenAI never returns others)."""
    unknown = [name for name in names if name not in choice.names]
    if not names or unknown:
        problem = f"calls unknown functions {unknown}" if unknown else "has no call that parses"
        raise ToolOutputError(f"tool_choice {choice.mode!r} asked for a call, but the output {problem}: {text[:200]!r}")


def lenient_arguments(block: str) -> str | None:
    """The arguments object of a named call whose wrapper JSON is incomplete (e.g. a missing closing brace)."""
    key = block.find('"arguments":')
    if key < 0:
        return None
    try:
        value, _ = json.JSONDecoder().raw_decode(block[key + len('"arguments":') :].lstrip())
    except json.JSONDecodeError:
        return None
    return json.dumps(value, ensure_ascii=False) if isinstance(value, dict) else None


def _parse_hermes(text: str) -> ParsedAnswer:
    if OPEN not in text:
        return ParsedAnswer(text)
    calls = []
    for block in _BLOCK.findall(text):
        parsed = parse_call(block.strip())
        if parsed is None:
            return ParsedAnswer(text)  # a malformed call: the client gets the text, as vLLM does
        calls.append(tool_call(*parsed))
    content = _BLOCK.sub("", text).strip()
    return ParsedAnswer(content or None, calls)


class ToolCallStream:
    """Turns streamed text deltas into OpenAI chat deltas: content as it comes, each call once it closes.

    Text that could be the start of `<tool_call>` is held back until it is decided. A call is sent as
    two deltas (id, type and name with empty arguments; then the arguments), the shape OpenAI streams.
    """

    def __init__(self, choice: ToolChoice) -> None:
        self.choice = choice
        self._pending = choice.prefill
        self._in_call = False
        self.calls = 0

    def feed(self, text: str) -> list[dict[str, Any]]:
        self._pending += text
        deltas: list[dict[str, Any]] = []
        while True:
            if self._in_call:
                end = self._pending.find(CLOSE)
                if end < 0:
                    return deltas
                deltas += self._call_deltas(self._pending[:end])
                self._pending, self._in_call = self._pending[end + len(CLOSE) :], False
                continue
            start = self._pending.find(OPEN)
            if start >= 0:
                deltas += self._content(self._pending[:start])
                self._pending, self._in_call = self._pending[start + len(OPEN) :], True
                continue
            keep = _partial_suffix(self._pending, OPEN)
            deltas += self._content(self._pending[: len(self._pending) - keep])
            self._pending = self._pending[len(self._pending) - keep :]
            return deltas

    def finish(self) -> list[dict[str, Any]]:
        """Whatever is held back at the end: an unclosed call is parsed as vLLM does; else it is text.
        A forced choice that produced no call raises ToolOutputError."""
        rest, self._pending = self._pending, ""
        deltas = self._content(rest)
        if self._in_call:
            self._in_call = False
            deltas = self._call_deltas(rest)
        if self.choice.forced and not self.calls:
            check_forced(self.choice, [], rest)
        return deltas

    def _content(self, text: str) -> list[dict[str, Any]]:
        if self.calls and not text.strip():
            return []  # whitespace between calls
        return [{"content": text}] if text else []

    def _call_deltas(self, block: str) -> list[dict[str, Any]]:
        parsed = parse_call(block.strip())
        if parsed is None and self.choice.name is not None and not self.calls:
            arguments = lenient_arguments(block)
            parsed = None if arguments is None else (self.choice.name, arguments)
        if parsed is None:
            return self._content(f"{OPEN}{block}")  # not a call after all: it was text
        name, arguments = parsed
        if self.choice.forced:
            check_forced(self.choice, [name], block)
        index, self.calls = self.calls, self.calls + 1
        head = {"index": index, "id": new_call_id(), "type": "function", "function": {"name": name, "arguments": ""}}
        return [
            {"tool_calls": [head]},
            {"tool_calls": [{"index": index, "function": {"arguments": arguments}}]},
        ]


def _partial_suffix(text: str, marker: str) -> int:
    """Length of the longest end of `text` that is a proper start of `marker`."""
    for size in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:size]):
            return size
    return 0
