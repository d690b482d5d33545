"""The OpenAI Agents SDK with its default model (the Responses API) pointed at the proxy: a tool loop,
run plain and streamed, recorded as llm_calls and linked tool_calls."""

from __future__ import annotations

import asyncio

from agents import Agent, OpenAIProvider, RunConfig, Runner, function_tool, set_tracing_disabled
from openai import AsyncOpenAI
from tests.proxy.conftest import ProxyServer, new_session

from evolvable.protocol.models import LLMCallStep, ToolCallStep
from evolvable.store import Store

set_tracing_disabled(True)


@function_tool
def lookup_order(order_id: str) -> str:
    """Where an order is."""
    return f"order {order_id} shipped"


def _agent(proxy: ProxyServer, key: str) -> tuple[Agent, RunConfig]:
    """The SDK's default provider and model class (the Responses API), only with the proxy's base_url."""
    client = AsyncOpenAI(base_url=f"{proxy.url}/v1", api_key=key, max_retries=0)
    agent = Agent(name="support", instructions="Answer order questions.", tools=[lookup_order], model="mock-tools")
    return agent, RunConfig(model_provider=OpenAIProvider(openai_client=client), tracing_disabled=True)


def _recorded(proxy: ProxyServer, store: Store, session_id: str) -> tuple[list[LLMCallStep], list[ToolCallStep]]:
    proxy.flush()
    steps = store.get_trajectory(session_id).steps
    return [s for s in steps if isinstance(s, LLMCallStep)], [s for s in steps if isinstance(s, ToolCallStep)]


def test_agent_tool_loop_is_recorded(lite_proxy: ProxyServer, sqlite_store: Store) -> None:
    session = new_session(lite_proxy)
    agent, config = _agent(lite_proxy, session["api_key"])
    result = Runner.run_sync(agent, "Where is order A-1?", run_config=config)
    assert result.final_output == "echo 0: order A-1 shipped"
    calls, [tool] = _recorded(lite_proxy, sqlite_store, session["id"])
    assert len(calls) == 2
    requested = calls[0].choices[0].message.tool_calls[0]
    assert requested.function.name == "lookup_order"
    assert tool.tool_call_id == requested.id and tool.llm_step_id == calls[0].id and tool.result == "order A-1 shipped"
    assert calls[1].choices[0].message.content == result.final_output
    assert calls[0].request_messages[0].role == "system"


def test_agent_streamed_run_is_recorded(lite_proxy: ProxyServer, sqlite_store: Store) -> None:
    session = new_session(lite_proxy)
    agent, config = _agent(lite_proxy, session["api_key"])

    async def run() -> tuple[str, str]:
        streamed = Runner.run_streamed(agent, "Where is order A-1?", run_config=config)
        deltas = []
        async for event in streamed.stream_events():
            if event.type == "raw_response_event" and event.data.type == "response.output_text.delta":
                deltas.append(event.data.delta)
        return "".join(deltas), str(streamed.final_output)

    streamed_text, final = asyncio.run(run())
    assert final == streamed_text == "echo 0: order A-1 shipped "
    calls, [tool] = _recorded(lite_proxy, sqlite_store, session["id"])
    assert [c.stream for c in calls] == [True, True]
    assert tool.llm_step_id == calls[0].id and tool.tool_call_id == calls[0].choices[0].message.tool_calls[0].id
    assert calls[1].choices[0].message.content == streamed_text
