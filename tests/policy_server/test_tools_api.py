"""Function tools on the real embedded model, through the real `openai` client and raw HTTP."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest
from tests.policy_server.helpers import Served

pytestmark = pytest.mark.slow

MODEL = "smollm2-135m"
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
ORDER = {
    "type": "function",
    "function": {
        "name": "lookup_order",
        "description": "Status of an order",
        "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}},
    },
}
ASK = [{"role": "user", "content": "What is the weather in Paris right now?"}]
NAMED = {"type": "function", "function": {"name": "get_weather"}}


def client(served: Served) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{served.base_url}/v1", api_key="unused", max_retries=0)


def prompt_text(served: Served, body: dict[str, Any]) -> str:
    return served.tokenizer.decode(body["prompt_token_ids"])


def test_named_tool_choice_returns_a_tool_call_with_token_ids_and_logprobs(served: Served) -> None:
    response = client(served).chat.completions.create(
        model=MODEL,
        messages=ASK,
        tools=[WEATHER, ORDER],
        tool_choice=NAMED,
        max_tokens=160,  # room for the 135M model to close its JSON
        temperature=0,
        logprobs=True,
        extra_body={"return_token_ids": True},
    )
    body = response.model_dump()
    choice = body["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    calls = choice["message"]["tool_calls"]
    assert len(calls) == 1 and calls[0]["type"] == "function" and calls[0]["id"].startswith("call_")
    assert calls[0]["function"]["name"] == "get_weather"
    assert isinstance(json.loads(calls[0]["function"]["arguments"]), dict)
    prompt = prompt_text(served, body)
    assert "<tools>" in prompt and json.dumps(WEATHER) in prompt
    assert prompt.endswith('<tool_call>\n{"name": "get_weather", "arguments": ')  # the prefill
    token_ids = choice["token_ids"]
    assert token_ids and len(choice["logprobs"]["content"]) == len(token_ids)
    assert body["usage"]["completion_tokens"] == len(token_ids)
    assert body["usage"]["prompt_tokens"] == len(body["prompt_token_ids"])


def test_streamed_tool_call_equals_the_whole_answer(served: Served) -> None:
    api = client(served)
    request: dict[str, Any] = {
        "model": MODEL,
        "messages": ASK,
        "tools": [WEATHER, ORDER],
        "tool_choice": NAMED,
        "max_tokens": 160,
        "temperature": 0,
        "extra_body": {"return_token_ids": True},
    }
    whole = api.chat.completions.create(**request).model_dump()["choices"][0]
    names, arguments, ids, token_ids, finish = [], "", [], [], None
    for chunk in api.chat.completions.create(**request, stream=True):
        data = chunk.model_dump()
        for choice in data["choices"]:
            token_ids += choice.get("token_ids") or []
            finish = choice["finish_reason"] or finish
            for call in choice["delta"].get("tool_calls") or []:
                ids += [call["id"]] if call.get("id") else []
                names += [call["function"]["name"]] if call["function"].get("name") else []
                arguments += call["function"].get("arguments") or ""
    assert finish == "tool_calls"
    assert names == ["get_weather"] and len(ids) == 1
    assert arguments == whole["message"]["tool_calls"][0]["function"]["arguments"]
    assert token_ids == whole["token_ids"]


def test_a_tool_loop_renders_the_call_and_its_result(served: Served) -> None:
    api = client(served)
    first = api.chat.completions.create(
        model=MODEL, messages=ASK, tools=[WEATHER], tool_choice="required", max_tokens=160, temperature=0
    )
    message = first.choices[0].message
    assert first.choices[0].finish_reason == "tool_calls"  # required with one tool: prefilled like a named call
    assert message.tool_calls and message.tool_calls[0].function.name == "get_weather"
    call = message.tool_calls[0]
    history = [
        *ASK,
        message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": '{"forecast": "sunny, 21 C"}'},
    ]
    second = httpx.post(
        f"{served.base_url}/v1/chat/completions",
        json={
            "model": MODEL,
            "messages": history,
            "tools": [WEATHER, ORDER],
            "tool_choice": "none",
            "max_tokens": 16,
            "temperature": 0,
            "return_token_ids": True,
        },
        timeout=120,
    ).json()
    prompt = prompt_text(served, second)
    assert '<tool_call>\n{"name": "get_weather", "arguments": ' in prompt  # the earlier call, as the model wrote it
    assert '<tool_response>\n{"forecast": "sunny, 21 C"}\n</tool_response>' in prompt
    assert "<tools>" not in prompt  # tool_choice none: no tools offered
    assert "tool_calls" not in second["choices"][0]["message"]
    assert second["choices"][0]["finish_reason"] in ("stop", "length")


def test_required_among_several_tools_calls_an_offered_function_or_says_it_could_not(served: Served) -> None:
    """Not constrained beyond the call's opening: a model this small may name a function that does not exist,
    which is reported (500, tool_call_parse_error), never passed on as a call."""
    response = httpx.post(
        f"{served.base_url}/v1/chat/completions",
        json={"model": MODEL, "messages": ASK, "tools": [WEATHER, ORDER], "tool_choice": "required"}
        | {"max_tokens": 60, "temperature": 0},
        timeout=120,
    )
    if response.status_code == 200:
        calls = response.json()["choices"][0]["message"]["tool_calls"]
        assert calls and {c["function"]["name"] for c in calls} <= {"get_weather", "lookup_order"}
    else:
        assert response.status_code == 500
        assert response.json()["error"]["code"] == "tool_call_parse_error"


def test_auto_offers_the_tools_and_answers_either_way(served: Served) -> None:
    body = httpx.post(
        f"{served.base_url}/v1/chat/completions",
        json={"model": MODEL, "messages": ASK, "tools": [WEATHER], "max_tokens": 40, "temperature": 0}
        | {"return_token_ids": True},
        timeout=120,
    ).json()
    assert json.dumps(WEATHER) in prompt_text(served, body)
    choice = body["choices"][0]
    if choice["message"].get("tool_calls"):
        assert choice["finish_reason"] == "tool_calls" and "<tool_call>" not in (choice["message"]["content"] or "")
    else:
        text = served.tokenizer.decode(choice["token_ids"], skip_special_tokens=True)
        assert choice["message"]["content"] == text and choice["finish_reason"] in ("stop", "length")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"tools": [{"type": "web_search_preview"}]}, "only function tools"),
        ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "not in `tools`"),
        ({"tool_choice": "required"}, "at least one tool"),
        ({"functions": [WEATHER["function"]]}, "not supported"),
        (
            {
                "tools": [WEATHER],
                "tool_choice": "required",
                "messages": [*ASK, {"role": "assistant", "content": "Let"}],
                "continue_final_message": True,
                "add_generation_prompt": False,
            },
            "cannot continue",
        ),
    ],
)
def test_tool_requests_the_server_cannot_honour_get_400(served: Served, extra: dict, message: str) -> None:
    response = httpx.post(
        f"{served.base_url}/v1/chat/completions", json={"model": MODEL, "messages": ASK} | extra, timeout=60
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert message in error["message"] and error["type"] == "invalid_request_error"
