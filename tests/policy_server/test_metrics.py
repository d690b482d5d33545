"""The policy server's `/metrics` with the real model: queue, batch, throughput and prefix-cache series move."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests.policy_server.helpers import Served

pytestmark = pytest.mark.slow


def scrape(served: Served) -> dict[str, float]:
    reply = httpx.get(f"{served.base_url}/metrics", timeout=30)
    assert reply.status_code == 200
    return {s.name: s.value for f in text_string_to_metric_families(reply.text) for s in f.samples if not s.labels}


def test_metrics_move_with_generation(served: Served) -> None:
    before = scrape(served)
    for name in ("evolvable_policy_queue_depth", "evolvable_policy_batch_size", "evolvable_policy_tokens_per_second"):
        assert name in before
    client = openai.OpenAI(base_url=f"{served.base_url}/v1", api_key="unused", max_retries=0)
    system = "You are a support agent for a shop. Answer briefly and politely. " * 8
    questions = ["Where is my parcel?", "Can I return shoes?", "Do you ship abroad?", "What is your phone number?"]

    def ask(question: str) -> str:
        reply = client.chat.completions.create(
            model="smollm2-135m",
            messages=[{"role": "system", "content": system}, {"role": "user", "content": question}],
            max_tokens=8,
            temperature=0,
        )
        return reply.choices[0].message.content or ""

    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(ask, questions))
    ask(questions[0])  # the same long system prompt again: a prefix-cache hit
    after = scrape(served)
    assert after["evolvable_policy_generated_tokens_total"] > before["evolvable_policy_generated_tokens_total"]
    assert after["evolvable_policy_requests_finished_total"] >= before["evolvable_policy_requests_finished_total"] + 5
    assert after["evolvable_policy_prefix_cache_hits_total"] > before["evolvable_policy_prefix_cache_hits_total"]
    assert after["evolvable_policy_decode_batch_size_count"] > before["evolvable_policy_decode_batch_size_count"]
    assert after["evolvable_policy_tokens_per_second"] > 0
    assert after["evolvable_policy_queue_depth"] == 0 and after["evolvable_policy_batch_size"] == 0
