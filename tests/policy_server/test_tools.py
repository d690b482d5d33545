"""Tool rendering and Hermes tool-call parsing, without a model."""

from __future__ import annotations

import json

import pytest

from evolvable.policy_server.tools import (
    ToolCallStream,
    ToolChoice,
    ToolOutputError,
    ToolRequestError,
    parse_answer,
    render_messages,
    resolve_tool_choice,
)

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
ORDER = {"type": "function", "function": {"name": "lookup_order", "parameters": {"type": "object"}}}
AUTO = ToolChoice("auto", names=("get_weather", "lookup_order"))


def test_tool_choice_resolution() -> None:
    both = ("get_weather", "lookup_order")
    assert resolve_tool_choice(None, None, None) == ToolChoice("none")
    assert resolve_tool_choice([WEATHER], None, None) == ToolChoice("auto", names=both[:1])
    assert resolve_tool_choice([WEATHER, ORDER], "required", False) == ToolChoice(
        "required", parallel=False, names=both
    )
    assert resolve_tool_choice([WEATHER], "required", None) == ToolChoice("named", name="get_weather", names=both[:1])
    named = {"type": "function", "function": {"name": "lookup_order"}}
    assert resolve_tool_choice([WEATHER, ORDER], named, None) == ToolChoice("named", name="lookup_order", names=both)
    assert resolve_tool_choice([WEATHER], "none", None).active is False


@pytest.mark.parametrize(
    ("tools", "choice", "message"),
    [
        ([{"type": "web_search"}], None, "only function tools"),
        ([{"type": "function", "function": {}}], None, "name"),
        ([{"type": "function", "function": {"name": "f", "parameters": "x"}}], None, "parameters"),
        ([WEATHER, WEATHER], None, "unique"),
        (None, "required", "at least one tool"),
        ([WEATHER], {"type": "function", "function": {"name": "nope"}}, "not in `tools`"),
        ([WEATHER], "sometimes", "tool_choice must be"),
    ],
)
def test_requests_the_server_cannot_honour_are_refused(tools: list | None, choice: object, message: str) -> None:
    with pytest.raises(ToolRequestError, match=message):
        resolve_tool_choice(tools, choice, None)


def test_rendering_adds_a_tools_block_and_tags_earlier_calls_and_results() -> None:
    messages = [
        {"role": "system", "content": "You are a support agent."},
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    ]
    rendered = render_messages(messages, [WEATHER], AUTO)
    assert rendered[0]["content"].startswith("You are a support agent.\n\n# Tools")
    assert json.dumps(WEATHER) in rendered[0]["content"]
    assert rendered[2] == {
        "role": "assistant",
        "content": '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
    }
    assert rendered[3] == {"role": "tool", "content": "<tool_response>\nsunny\n</tool_response>"}
    without = render_messages(messages[1:2], [WEATHER], ToolChoice("none"))
    assert without == messages[1:2]  # tool_choice none: no tools block
    assert render_messages(messages[1:2], [WEATHER], AUTO)[0]["role"] == "system"


def test_parse_answer_like_vllms_hermes_parser() -> None:
    text = 'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    parsed = parse_answer(text, AUTO)
    assert parsed.content == "Let me check."
    assert [(c["type"], c["function"]["name"], json.loads(c["function"]["arguments"])) for c in parsed.tool_calls] == [
        ("function", "get_weather", {"city": "Paris"})
    ]
    assert parsed.tool_calls[0]["id"].startswith("call_")
    two = '<tool_call>{"name": "a", "arguments": {}}</tool_call>\n<tool_call>{"name": "b", "arguments": {"x": 1}}'
    assert [c["function"]["name"] for c in parse_answer(two, AUTO).tool_calls] == ["a", "b"]  # unclosed last call
    assert parse_answer(two, AUTO).content is None
    assert parse_answer("plain answer", AUTO).content == "plain answer"
    broken = "<tool_call>{not json}</tool_call>"
    assert parse_answer(broken, AUTO).content == broken and not parse_answer(broken, AUTO).tool_calls


def test_forced_choices_parse_the_prefilled_call_or_fail_loudly() -> None:
    named = ToolChoice("named", name="get_weather", names=("get_weather",))
    parsed = parse_answer('{"city": "Paris"}}\n</tool_call>', named)
    assert parsed.content is None
    assert json.loads(parsed.tool_calls[0]["function"]["arguments"]) == {"city": "Paris"}
    lenient = parse_answer('{"city": "Oslo"}\n', named)  # the wrapper's closing brace never came
    assert json.loads(lenient.tool_calls[0]["function"]["arguments"]) == {"city": "Oslo"}
    with pytest.raises(ToolOutputError):
        parse_answer("Paris is nice", named)
    required = ToolChoice("required", names=("get_weather", "lookup_order"))
    assert parse_answer('{"name": "lookup_order", "arguments": {"id": 1}}</tool_call>', required).tool_calls
    with pytest.raises(ToolOutputError, match="no call"):
        parse_answer("I will not call anything", required)
    with pytest.raises(ToolOutputError, match="unknown functions"):
        parse_answer('{"name": "Paris", "arguments": {}}</tool_call>', required)
    unknown_in_auto = parse_answer('<tool_call>{"name": "Paris", "arguments": {}}</tool_call>', AUTO)
    assert unknown_in_auto.tool_calls[0]["function"]["name"] == "Paris"  # auto: passed on, as vLLM does


def stream(pieces: list[str], choice: ToolChoice = AUTO) -> list[dict]:
    parser = ToolCallStream(choice)
    deltas = [d for piece in pieces for d in parser.feed(piece)]
    return deltas + parser.finish()


def test_streamed_calls_arrive_as_openai_deltas_however_the_text_is_split() -> None:
    text = 'Checking.<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    for size in (1, 3, 7, len(text)):
        deltas = stream([text[i : i + size] for i in range(0, len(text), size)])
        content = "".join(d.get("content", "") for d in deltas)
        calls = [c for d in deltas for c in d.get("tool_calls", [])]
        assert content == "Checking."
        assert calls[0]["index"] == 0 and calls[0]["type"] == "function" and calls[0]["id"].startswith("call_")
        assert calls[0]["function"] == {"name": "get_weather", "arguments": ""}
        assert json.loads("".join(c["function"]["arguments"] for c in calls)) == {"city": "Paris"}


def test_stream_holds_back_only_what_could_open_a_call() -> None:
    parser = ToolCallStream(AUTO)
    assert parser.feed("a < b and <tool") == [{"content": "a < b and "}]
    assert parser.feed("box>") == [{"content": "<toolbox>"}]
    assert parser.finish() == []
    assert stream(["<tool_call>{oops</tool_call> done"]) == [{"content": "<tool_call>{oops"}, {"content": " done"}]


def test_stream_with_a_prefilled_named_call_and_a_forced_failure() -> None:
    named = ToolChoice("named", name="get_weather", names=("get_weather",))
    deltas = stream(['{"city"', ': "Rome"}}', "\n</tool_call>"], named)
    calls = [c for d in deltas for c in d.get("tool_calls", [])]
    assert calls[0]["function"]["name"] == "get_weather"
    assert json.loads(calls[1]["function"]["arguments"]) == {"city": "Rome"}
    with pytest.raises(ToolOutputError):
        stream(["no call here"], ToolChoice("required", names=("get_weather",)))
    with pytest.raises(ToolOutputError, match="unknown"):
        stream(['{"name": "Paris", "arguments": {}}</tool_call>'], ToolChoice("required", names=("get_weather",)))
