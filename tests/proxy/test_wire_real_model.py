"""The wire protocols against the real embedded model (SmolLM2-135M on CPU), which speaks only chat
completions: every Responses / Messages call is translated, and the trajectory in PostgreSQL holds the
exact text the client received with the engine's token ids. Few tokens: the point is the wiring."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
from agents import Agent, ModelSettings, OpenAIProvider, RunConfig, Runner, set_tracing_disabled
from tests.policy_server.helpers import serve
from tests.proxy.conftest import ProxyServer, new_session

from evolvable.protocol.models import LLMCallStep
from evolvable.proxy.app import create_app
from evolvable.proxy.config import ProxyConfig, UpstreamConfig
from evolvable.store import Store

pytestmark = pytest.mark.slow
set_tracing_disabled(True)

ASK = "Say hello in three words."


@pytest.fixture(scope="module")
def model_url() -> Iterator[tuple[str, str]]:
    from evolvable.model_loading import load_base_model

    with serve(*load_base_model(), max_batch=4) as served:
        yield f"{served.base_url}/v1", served.engine.model_name


@pytest.fixture
def real_proxy(
    model_url: tuple[str, str], postgres_url: str, tmp_path: Path
) -> Iterator[tuple[ProxyServer, Store, str]]:
    store = Store.open(postgres_url)
    cfg = ProxyConfig(
        upstreams=[UpstreamConfig(name="policy", base_url=model_url[0], timeout_s=300)], spool_dir=tmp_path
    )
    server = ProxyServer(create_app(cfg, store)).start()
    yield server, store, model_url[1]
    server.stop()
    store.close()


def _calls(proxy: ProxyServer, store: Store, trajectory_id: str) -> list[LLMCallStep]:
    proxy.flush()
    return [s for s in store.get_trajectory(trajectory_id).steps if isinstance(s, LLMCallStep)]


def _assert_recorded(call: LLMCallStep, text: str) -> None:
    assert call.choices[0].message is not None and call.choices[0].message.content == text
    assert call.prompt_token_ids and call.choices[0].completion_token_ids  # the engine's own ids
    assert call.choices[0].logprobs is not None and len(call.choices[0].logprobs) == len(
        call.choices[0].completion_token_ids
    )


def test_responses_plain_stream_and_follow_up(real_proxy: tuple[ProxyServer, Store, str]) -> None:
    proxy, store, model = real_proxy
    session = new_session(proxy)
    client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key=session["api_key"], max_retries=0, timeout=300)
    first = client.responses.create(
        model=model, instructions="Be brief.", input=ASK, max_output_tokens=12, temperature=0
    )
    assert first.output_text
    events = list(
        client.responses.create(
            model=model, previous_response_id=first.id, input="Again.", max_output_tokens=12, stream=True
        )
    )
    streamed = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert events[-1].type in ("response.completed", "response.incomplete")
    assert events[-1].response.output_text == streamed  # type: ignore[union-attr]
    plain, follow_up = _calls(proxy, store, session["id"])
    _assert_recorded(plain, first.output_text)
    _assert_recorded(follow_up, streamed)
    assert [m.role for m in follow_up.request_messages] == ["user", "assistant", "user"]
    assert follow_up.request_messages[1].content == first.output_text


def test_messages_plain_and_stream(real_proxy: tuple[ProxyServer, Store, str]) -> None:
    proxy, store, model = real_proxy
    session = new_session(proxy)
    client = anthropic.Anthropic(base_url=proxy.url, api_key=session["api_key"], max_retries=0, timeout=300)
    ask: dict[str, Any] = {
        "model": model,
        "max_tokens": 12,
        "system": "Be brief.",
        "messages": [{"role": "user", "content": ASK}],
    }
    message = client.messages.create(**ask)
    text = message.content[0].text  # type: ignore[union-attr]
    assert text and message.stop_reason in ("end_turn", "max_tokens") and message.usage.output_tokens > 0
    with client.messages.stream(**ask) as stream:
        streamed = "".join(stream.text_stream)
    assert streamed
    plain, streamed_call = _calls(proxy, store, session["id"])
    _assert_recorded(plain, text)
    _assert_recorded(streamed_call, streamed)
    counted = client.messages.count_tokens(model=model, system="Be brief.", messages=ask["messages"])
    assert counted.input_tokens == len(plain.prompt_token_ids or [])  # the prompt the engine saw, exactly


def test_agents_sdk_default_model(real_proxy: tuple[ProxyServer, Store, str]) -> None:
    proxy, store, model = real_proxy
    session = new_session(proxy)
    client = openai.AsyncOpenAI(base_url=f"{proxy.url}/v1", api_key=session["api_key"], max_retries=0, timeout=300)
    # Greedy: a sampled reply of this small model sometimes runs to the server's token limit, which the
    # SDK reports as an incomplete response (a property of the model, not of the wire).
    agent = Agent(name="greeter", instructions="Be brief.", model=model, model_settings=ModelSettings(temperature=0))
    config = RunConfig(model_provider=OpenAIProvider(openai_client=client), tracing_disabled=True)
    result = asyncio.run(Runner.run(agent, ASK, run_config=config, max_turns=1))
    [call] = _calls(proxy, store, session["id"])
    _assert_recorded(call, str(result.final_output))
