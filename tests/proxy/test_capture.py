"""Core capture, end to end with the real `openai` client, on SQLite and PostgreSQL: the recorded
trajectory must match what happened, step by step."""

from __future__ import annotations

import asyncio
import json

import httpx
import openai
from tests.proxy.conftest import ProxyServer, new_session
from tests.proxy.mock_upstream import PROMPT_IDS, MockUpstream

from evolvable.protocol.models import LLMCallStep, SignalKind, StepStatus, ToolCallStep, TrajectoryStatus
from evolvable.store import Store


def _auth(session: dict) -> dict[str, str]:
    return {"Authorization": f"Bearer {session['api_key']}"}


def test_tool_loop_recorded_step_by_step(proxy: ProxyServer, store: Store, upstream: MockUpstream) -> None:
    session = new_session(proxy, task_input="Where is order A-1?", task_id="task-7", metadata={"intent": "order"})
    client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key=session["api_key"])
    tools = [{"type": "function", "function": {"name": "lookup_order", "parameters": {"type": "object"}}}]
    messages: list[dict] = [{"role": "user", "content": "Where is order A-1?"}]
    first = client.chat.completions.create(model="mock-tools", messages=messages, tools=tools, temperature=0.3, seed=7)
    # The proxy asked for token ids and logprobs, and hid them from a client that did not ask.
    assert upstream.requests[-1]["return_token_ids"] is True and upstream.requests[-1]["logprobs"] is True
    raw = first.model_dump()
    assert "prompt_token_ids" not in raw and "token_ids" not in raw["choices"][0]
    assert first.choices[0].logprobs is None
    call = first.choices[0].message.tool_calls[0]
    # The agent reports the tool outcome explicitly, then sends the result back.
    r = httpx.post(
        f"{proxy.url}/v1/sessions/{session['id']}/steps",
        headers=_auth(session),
        json={
            "kind": "tool_call",
            "tool_name": "lookup_order",
            "tool_call_id": call.id,
            "status": "ok",
            "arguments": {"order_id": "A-1"},
            "result": "shipped",
            "latency_ms": 12.5,
        },
    )
    assert r.status_code == 201, r.text
    messages += [
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "shipped"},
    ]
    second = client.chat.completions.create(model="mock", messages=messages)
    assert second.choices[0].message.content == "echo 0: shipped"
    signals = [
        {"kind": "verifier", "value": 1.0, "tool_call_id": call.id, "label": "right_tool"},
        {"kind": "process", "value": 0.5, "response_id": second.id},
    ]
    r = httpx.post(
        f"{proxy.url}/v1/sessions/{session['id']}/signals", headers=_auth(session), json={"signals": signals}
    )
    assert r.status_code == 201, r.text
    r = httpx.post(
        f"{proxy.url}/v1/sessions/{session['id']}/end",
        headers=_auth(session),
        json={"status": "completed", "outcome": 1.0},
    )
    assert r.status_code == 200, r.text
    proxy.flush()

    t = store.get_trajectory(session["id"])
    assert (t.agent, t.task_id, t.task_input, t.status) == (
        "tester",
        "task-7",
        "Where is order A-1?",
        TrajectoryStatus.completed,
    )
    assert t.metadata["intent"] == "order"
    assert [s.kind for s in t.steps] == ["llm_call", "tool_call", "llm_call"]
    llm1, tool, llm2 = t.steps
    assert isinstance(llm1, LLMCallStep) and isinstance(tool, ToolCallStep) and isinstance(llm2, LLMCallStep)
    assert llm1.request_messages[0].content == "Where is order A-1?"
    assert llm1.tools == tools and llm1.sampling == {"temperature": 0.3, "seed": 7}
    assert llm1.response_id == first.id and llm1.choices[0].finish_reason == "tool_calls"
    assert llm1.choices[0].message.tool_calls[0].id == call.id
    assert llm1.prompt_token_ids == PROMPT_IDS and llm1.has_token_ids
    assert len(llm1.choices[0].logprobs) == len(llm1.choices[0].completion_token_ids)
    assert llm1.usage.total_tokens == 8 and llm1.latency_ms is not None and llm1.status == StepStatus.ok
    # The explicit report won; the `role: tool` message did not record the same call twice.
    assert tool.tool_call_id == call.id and tool.status == StepStatus.ok and tool.result == "shipped"
    assert tool.latency_ms == 12.5
    assert [m.role for m in llm2.request_messages] == ["user", "assistant", "tool"]
    assert llm2.response_id == second.id and llm2.choices[0].message.content == "echo 0: shipped"
    by_kind = {s.kind: s for s in t.signals}
    assert by_kind[SignalKind.verifier].step_id == tool.id
    assert by_kind[SignalKind.process].step_id == llm2.id
    assert t.outcome() == 1.0

    # Over HTTP the same trajectory comes back as ATDP JSON.
    got = httpx.get(f"{proxy.url}/v1/trajectories/{session['id']}").json()
    assert [s["kind"] for s in got["steps"]] == ["llm_call", "tool_call", "llm_call"]


def test_async_streaming_parallel_tools_and_n(proxy: ProxyServer, store: Store) -> None:
    session = new_session(proxy)

    async def run() -> tuple[list, list]:
        client = openai.AsyncOpenAI(base_url=f"{proxy.url}/v1", api_key=session["api_key"])
        chunks = [
            c
            async for c in await client.chat.completions.create(
                model="mock-tools-parallel",
                messages=[{"role": "user", "content": "two things"}],
                stream=True,
                stream_options={"include_usage": True},
            )
        ]
        text_chunks = [
            c
            async for c in await client.chat.completions.create(
                model="mock", messages=[{"role": "user", "content": "alpha beta"}], stream=True, n=2
            )
        ]
        await client.close()
        return chunks, text_chunks

    chunks, _text_chunks = asyncio.run(run())
    streamed_args = "".join(
        tc.function.arguments or "" for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])
    )
    assert streamed_args == '{"order_id": "A-1"}{"city": "Paris"}'
    assert all("token_ids" not in c.model_dump() for c in chunks)
    proxy.flush()
    t = store.get_trajectory(session["id"])
    tools_step, n_step = t.llm_calls()
    assert tools_step.stream and tools_step.time_to_first_token_ms is not None
    calls = tools_step.choices[0].message.tool_calls
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [
        ("lookup_order", {"order_id": "A-1"}),
        ("get_weather", {"city": "Paris"}),
    ]
    assert tools_step.usage is not None and tools_step.usage.completion_tokens == 4
    assert tools_step.choices[0].completion_token_ids == [400, 401, 402, 403]
    assert tools_step.prompt_token_ids == PROMPT_IDS
    assert [c.message.content for c in n_step.choices] == ["echo 0: alpha beta ", "echo 1: alpha beta "]
    assert [len(c.completion_token_ids) for c in n_step.choices] == [4, 4]
    assert n_step.choices[0].logprobs == [-0.5] * 4


def test_call_without_session_is_its_own_trajectory(proxy: ProxyServer, store: Store) -> None:
    client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key="sk-client-key", max_retries=0)
    ok = client.chat.completions.with_raw_response.create(
        model="mock", messages=[{"role": "user", "content": "hi"}], user="u-9"
    )
    assert float(ok.headers["x-evolvable-overhead-ms"]) >= 0
    try:
        client.chat.completions.create(model="error-500", messages=[{"role": "user", "content": "boom"}])
        raise AssertionError("expected an error")
    except openai.InternalServerError as err:
        assert err.status_code == 500 and "engine exploded" in str(err)
    proxy.flush()
    ok_t = store.get_trajectory(ok.headers["x-evolvable-trajectory-id"])
    assert ok_t.status == TrajectoryStatus.completed and ok_t.end_user == "u-9" and len(ok_t.steps) == 1
    failed = [
        t
        for t in store.iter_trajectories(
            __import__("evolvable.store", fromlist=["TrajectoryFilter"]).TrajectoryFilter(status="failed")
        )
    ]
    assert len(failed) == 1 and failed[0].steps[0].error.status_code == 500
    assert failed[0].steps[0].status == StepStatus.error
