"""The accelerator path: device and dtype choices, and the batched sampler (checked here on CPU tensors)."""

from __future__ import annotations

import pytest
import torch

from evolvable.errors import EvolvableError
from evolvable.model_loading import resolve_device, resolve_dtype
from evolvable.policy_server.sampling import SamplingParams, sample_rows_on_device


def test_device_and_dtype_choices() -> None:
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert resolve_dtype("auto", torch.device("cpu")) is torch.float32
    assert resolve_dtype("bfloat16", torch.device("cpu")) is torch.bfloat16
    with pytest.raises(EvolvableError, match="unknown device"):
        resolve_device("tpu")
    with pytest.raises(EvolvableError, match="unknown dtype"):
        resolve_dtype("float8", torch.device("cpu"))
    if torch.cuda.is_available():
        assert resolve_dtype("auto", torch.device("cuda")) in (torch.bfloat16, torch.float16)
        with pytest.raises(EvolvableError, match="CUDA device"):
            resolve_device(f"cuda:{torch.cuda.device_count()}")
    else:
        with pytest.raises(EvolvableError, match="no CUDA GPU is visible"):
            resolve_device("cuda")


def _params(seed: int, **kw: object) -> SamplingParams:
    params = SamplingParams(seed=seed, **kw)  # type: ignore[arg-type]
    return params


def test_batched_sampler_greedy_rows_take_the_argmax_and_report_raw_logprobs() -> None:
    logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(0))
    params = [_params(1, temperature=0.0, top_logprobs=2) for _ in range(3)]
    draws = sample_rows_on_device(logits, params, [p.make_generator() for p in params])
    raw = torch.log_softmax(logits, dim=-1)
    for row, (token, processed, raw_logprob, top) in enumerate(draws):
        assert token == int(torch.argmax(logits[row])) and processed == 0.0
        assert raw_logprob == pytest.approx(float(raw[row, token]), abs=1e-6)
        assert top[0][0] == token and len(top) == 2


def test_batched_sampler_is_seeded_per_row_and_respects_top_p() -> None:
    logits = torch.randn(4, 200, generator=torch.Generator().manual_seed(1))

    def draw(rows: list[int], seeds: list[int], top_p: float = 1.0) -> list[int]:
        params = [_params(s, temperature=1.0, top_p=top_p) for s in seeds]
        return [d[0] for d in sample_rows_on_device(logits[rows], params, [p.make_generator() for p in params])]

    alone = draw([2], [7])
    together = draw([0, 1, 2, 3], [3, 4, 7, 5])
    assert together[2] == alone[0]  # the same seed draws the same token whatever shares the batch
    assert len({draw([0], [s])[0] for s in range(40)}) > 5  # different seeds do spread out
    probs = torch.softmax(logits[0], dim=-1)
    ordered = torch.argsort(probs, descending=True)
    nucleus = set(ordered[: int((torch.cumsum(probs[ordered], 0) < 0.3).sum()) + 1].tolist())
    assert {draw([0], [s], top_p=0.3)[0] for s in range(40)} <= nucleus


def test_batched_sampler_reports_the_processed_logprob_of_the_draw() -> None:
    logits = torch.randn(1, 30, generator=torch.Generator().manual_seed(2))
    params = [_params(11, temperature=0.5)]
    token, processed, raw_logprob, _ = sample_rows_on_device(logits, params, [params[0].make_generator()])[0]
    assert processed == pytest.approx(float(torch.log_softmax(logits[0] / 0.5, dim=-1)[token]), abs=1e-5)
    assert raw_logprob == pytest.approx(float(torch.log_softmax(logits[0], dim=-1)[token]), abs=1e-5)


def test_a_cancelled_generate_stops_generating(base_model: tuple) -> None:
    """A non-streamed request hears from the engine only when it ends; a caller that leaves still cancels it."""
    import asyncio
    import time

    from evolvable.policy_server.engine import Engine

    engine = Engine(*base_model, max_batch=2).start()
    try:

        async def leave_early() -> None:
            params = SamplingParams(max_tokens=400, temperature=0.0, ignore_eos=True)
            task = asyncio.create_task(engine.generate(engine.text_prompt_ids("Hello"), params))
            while engine.stats.generated_tokens == 0:
                await asyncio.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

        asyncio.run(leave_early())
        deadline = time.monotonic() + 120  # a bound for a stuck engine, not a timing assertion
        while engine.stats.requests_finished < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert engine.stats.requests_cancelled == 1 and engine.stats.generated_tokens < 400
    finally:
        engine.stop()


def test_prompts_prefilled_together_generate_what_one_by_one_prefills_do(base_model: tuple) -> None:
    """The accelerator's batched prefill (forced on here, on CPU) must not change a greedy completion."""
    from evolvable.policy_server.engine import Engine

    questions = ["Hi", "Where is my order A-17? It has been more than a week now.", "Reset my password, please."]

    def completions(batch_prefill: bool) -> tuple[list[list[int]], int]:
        engine = Engine(*base_model, max_batch=4, prefix_cache_mb=0, batch_prefill=batch_prefill)
        done: list[list[int]] = [[] for _ in questions]
        for i, question in enumerate(questions):
            prompt = engine.chat_prompt_ids([{"role": "user", "content": question}])
            params = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True)
            engine.submit(prompt, params, lambda update, i=i: done[i].extend(update.token_ids))
        engine._admit()  # all three are admitted in this one call
        while engine._running:
            engine._decode_step()
        return done, engine.stats.prefill_calls

    alone, alone_calls = completions(False)
    together, together_calls = completions(True)
    assert (alone_calls, together_calls) == (3, 1)
    assert together == alone and all(len(tokens) == 8 for tokens in together)
