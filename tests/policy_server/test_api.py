"""The policy server with the real model, through the real `openai` client and raw HTTP."""

from __future__ import annotations

import asyncio

import httpx
import openai
import pytest
import torch
from tests.policy_server.helpers import Served, logprob_tolerance

pytestmark = pytest.mark.slow

MODEL = "smollm2-135m"
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


def client(served: Served) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{served.base_url}/v1", api_key="unused", max_retries=0)


def recomputed_logprobs(served: Served, prompt_ids: list[int], token_ids: list[int]) -> list[float]:
    ids = torch.tensor([prompt_ids + token_ids], device=served.model.device)
    with torch.inference_mode():
        logprobs = torch.log_softmax(served.model(ids).logits[0].float(), dim=-1)
    start = len(prompt_ids) - 1
    return [float(logprobs[start + i, token]) for i, token in enumerate(token_ids)]


def test_chat_returns_engine_token_ids_and_logprobs(served: Served) -> None:
    response = client(served).chat.completions.create(
        model=MODEL,
        messages=QUESTION,
        max_tokens=12,
        temperature=0,
        logprobs=True,
        extra_body={"return_token_ids": True},
    )
    body = response.model_dump()
    choice = body["choices"][0]
    text = choice["message"]["content"]
    assert "Paris" in text
    expected_prompt = served.tokenizer.apply_chat_template(
        QUESTION, add_generation_prompt=True, tokenize=True, return_dict=True
    )["input_ids"]
    assert body["prompt_token_ids"] == list(expected_prompt)
    token_ids = choice["token_ids"]
    assert served.tokenizer.decode(token_ids, skip_special_tokens=True) == text
    entries = choice["logprobs"]["content"]
    assert len(entries) == len(token_ids)
    assert b"".join(bytes(e["bytes"]) for e in entries).decode() == served.tokenizer.decode(token_ids)
    recomputed = recomputed_logprobs(served, body["prompt_token_ids"], token_ids)
    assert [e["logprob"] for e in entries] == pytest.approx(recomputed, abs=logprob_tolerance(served.model))
    assert body["usage"]["completion_tokens"] == len(token_ids)


def test_streaming_matches_non_streaming(served: Served) -> None:
    api = client(served)
    whole = api.chat.completions.create(
        model=MODEL, messages=QUESTION, max_tokens=12, temperature=0, extra_body={"return_token_ids": True}
    )
    stream = api.chat.completions.create(
        model=MODEL,
        messages=QUESTION,
        max_tokens=12,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"return_token_ids": True},
    )
    text, token_ids, prompt_ids, finish, usage = "", [], None, None, None
    for chunk in stream:
        data = chunk.model_dump()
        prompt_ids = prompt_ids or data.get("prompt_token_ids")
        usage = data.get("usage") or usage
        for choice in data["choices"]:
            text += choice["delta"].get("content") or ""
            token_ids += choice.get("token_ids") or []
            finish = choice["finish_reason"] or finish
    assert text == whole.choices[0].message.content
    assert token_ids == whole.model_dump()["choices"][0]["token_ids"]
    assert prompt_ids == whole.model_dump()["prompt_token_ids"]
    assert finish == whole.choices[0].finish_reason
    assert usage["completion_tokens"] == len(token_ids)


def test_seeded_sampling_is_reproducible(served: Served) -> None:
    api = client(served)

    def sample(seed: int) -> list[int]:
        response = api.chat.completions.create(
            model=MODEL,
            messages=QUESTION,
            max_tokens=16,
            temperature=1.0,
            seed=seed,
            extra_body={"return_token_ids": True, "ignore_eos": True},
        )
        return response.model_dump()["choices"][0]["token_ids"]

    assert sample(11) == sample(11)
    assert sample(11) != sample(12)


def test_n_choices_and_stop_strings(served: Served) -> None:
    response = client(served).chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "List three colors, one per line."}],
        max_tokens=24,
        temperature=0.8,
        seed=3,
        n=3,
        stop=["\n"],
    )
    assert [c.index for c in response.choices] == [0, 1, 2]
    for choice in response.choices:
        assert "\n" not in (choice.message.content or "")


async def test_concurrent_requests_are_batched(served: Served) -> None:
    before = served.engine.stats.batched_decode_steps
    api = openai.AsyncOpenAI(base_url=f"{served.base_url}/v1", api_key="unused", max_retries=0)
    questions = [f"Count from {i} to {i + 10}." for i in range(6)]
    responses = await asyncio.gather(
        *(
            api.chat.completions.create(
                model=MODEL,
                messages=[{"role": "user", "content": q}],
                max_tokens=12,
                temperature=0,
                extra_body={"ignore_eos": True},
            )
            for q in questions
        )
    )
    assert all(r.usage.completion_tokens == 12 for r in responses)
    assert served.engine.stats.batched_decode_steps > before
    assert served.engine.stats.max_decode_batch >= 2


def test_batched_greedy_equals_one_at_a_time(served: Served) -> None:
    """Rows of a batch do not leak into each other: greedy answers match `model.generate` alone."""
    api = client(served)
    prompts = [[{"role": "user", "content": q}] for q in ("Name a fruit.", "What is 2 + 2?", "Say hello in French.")]

    async def together() -> list[list[int]]:
        aapi = openai.AsyncOpenAI(base_url=f"{served.base_url}/v1", api_key="unused", max_retries=0)
        results = await asyncio.gather(
            *(
                aapi.chat.completions.create(
                    model=MODEL, messages=m, max_tokens=10, temperature=0, extra_body={"return_token_ids": True}
                )
                for m in prompts
            )
        )
        return [r.model_dump()["choices"][0]["token_ids"] for r in results]

    batched = asyncio.run(together())
    for messages, token_ids in zip(prompts, batched, strict=True):
        ids = served.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
        )["input_ids"]
        with torch.inference_mode():
            reference = served.model.generate(ids, max_new_tokens=10, do_sample=False)[0, ids.shape[1] :].tolist()
        assert token_ids == reference[: len(token_ids)]
    del api


def test_completions_with_text_and_token_prompts(served: Served) -> None:
    api = client(served)
    text = api.completions.create(
        model=MODEL,
        prompt="The capital of France is",
        max_tokens=6,
        temperature=0,
        logprobs=2,
        extra_body={"return_token_ids": True},
    ).model_dump()
    choice = text["choices"][0]
    assert choice["prompt_token_ids"] == served.tokenizer("The capital of France is")["input_ids"]
    assert served.tokenizer.decode(choice["token_ids"], skip_special_tokens=True) == choice["text"]
    assert len(choice["logprobs"]["token_logprobs"]) == len(choice["token_ids"])
    by_ids = api.completions.create(model=MODEL, prompt=choice["prompt_token_ids"], max_tokens=6, temperature=0)
    assert by_ids.choices[0].text == choice["text"]


def test_models_and_health(served: Served) -> None:
    assert [m.id for m in client(served).models.list()] == [MODEL]
    assert httpx.get(f"{served.base_url}/health").json()["status"] == "ok"


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"model": "no-such-model", "messages": QUESTION}, 404),
        ({"model": MODEL, "messages": []}, 400),
        ({"model": MODEL, "messages": QUESTION, "temperature": -1}, 400),
        ({"model": MODEL, "messages": QUESTION, "n": 1000}, 400),
        ({"model": MODEL, "messages": QUESTION, "max_tokens": 0}, 400),
        ({"model": MODEL, "messages": QUESTION, "top_p": 0}, 400),
        ({"model": MODEL, "messages": [{"role": "user", "content": "x " * 9000}]}, 400),
        ({"messages": QUESTION}, 400),
        ({"model": MODEL, "messages": QUESTION, "continue_final_message": True, "add_generation_prompt": False}, 400),
        (
            {
                "model": MODEL,
                "messages": [*QUESTION, {"role": "assistant", "content": "x"}],
                "continue_final_message": True,
            },
            400,
        ),
    ],
)
def test_bad_chat_requests_get_openai_errors(served: Served, body: dict, status: int) -> None:
    response = httpx.post(f"{served.base_url}/v1/chat/completions", json=body, timeout=60)
    assert response.status_code == status
    assert set(response.json()["error"]) >= {"message", "type", "code"}


def test_continue_final_message_continues_the_prefilled_answer(served: Served) -> None:
    """vLLM's prefill: the prompt ends inside the assistant message and the answer is only the continuation."""
    prefix = "The capital of France is"
    messages = [*QUESTION, {"role": "assistant", "content": prefix}]
    response = client(served).chat.completions.create(
        model=MODEL,
        messages=messages,  # type: ignore[arg-type]
        max_tokens=4,
        temperature=0,
        extra_body={"continue_final_message": True, "add_generation_prompt": False, "return_token_ids": True},
    )
    body = response.model_dump()
    expected = served.tokenizer.apply_chat_template(
        messages, continue_final_message=True, add_generation_prompt=False, tokenize=True, return_dict=True
    )["input_ids"]
    assert body["prompt_token_ids"] == list(expected)
    assert served.tokenizer.decode(body["prompt_token_ids"]).endswith(prefix)
    text = body["choices"][0]["message"]["content"]
    assert "Paris" in text and not text.startswith(prefix)


def test_bad_json_and_adapter_errors(served: Served) -> None:
    url = served.base_url
    assert httpx.post(f"{url}/v1/chat/completions", content=b"{not json").status_code == 400
    assert httpx.post(f"{url}/v1/completions", json={"model": MODEL, "prompt": [99999999]}).status_code == 400
    missing = httpx.post(f"{url}/v1/load_lora_adapter", json={"lora_name": "a", "lora_path": "/nonexistent/adapter"})
    assert missing.status_code == 404 and "adapter_config.json" in missing.json()["error"]["message"]
    assert httpx.post(f"{url}/v1/unload_lora_adapter", json={"lora_name": "never-loaded"}).status_code == 404
    assert httpx.post(f"{url}/v1/load_lora_adapter", json={"lora_name": "a"}).status_code == 400


def test_a_disconnected_stream_stops_generating(served: Served) -> None:
    import time

    body = {"model": MODEL, "messages": QUESTION, "max_tokens": 400, "stream": True, "ignore_eos": True}
    stats = served.engine.stats
    generated_before = stats.generated_tokens
    with httpx.stream("POST", f"{served.base_url}/v1/chat/completions", json=body, timeout=60) as response:
        lines = response.iter_lines()
        assert next(lines).startswith("data: ")
        submitted = stats.requests_submitted  # ours included: its first chunk has arrived
    # Wait until every request up to ours has left the engine (counters are written by the engine thread).
    deadline = time.monotonic() + 300  # a bound for a stuck engine, not a timing assertion
    while stats.requests_finished < submitted and time.monotonic() < deadline:
        time.sleep(0.1)
    assert stats.requests_finished >= submitted
    assert stats.generated_tokens - generated_before < 400  # cancelled, not run to max_tokens


def test_processed_logprobs_mode_reports_the_sampling_distribution(base_model: tuple) -> None:
    from evolvable.policy_server.engine import Engine
    from evolvable.policy_server.sampling import SamplingParams

    model, tokenizer = base_model
    with Engine(model, tokenizer, logprobs_mode="processed") as engine:
        prompt = engine.chat_prompt_ids(QUESTION)
        result = engine.generate_blocking(
            prompt, SamplingParams(max_tokens=6, temperature=0.7, seed=4, ignore_eos=True)
        )
    ids = torch.tensor([prompt + result.token_ids], device=model.device)
    with torch.inference_mode():
        scaled = torch.log_softmax(model(ids).logits[0].float() / 0.7, dim=-1)
    expected = [float(scaled[len(prompt) - 1 + i, t]) for i, t in enumerate(result.token_ids)]
    assert result.logprobs == pytest.approx(expected, abs=logprob_tolerance(model))
