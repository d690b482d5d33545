"""With the real embedded model: trajectories recorded through the proxy from the policy server become
samples whose tokens decode to the recorded text and whose recomputed logprobs match the behaviour
logprobs; one real training step produces an adapter the policy server hot-loads and serves."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import torch

from evolvable.app.local import LocalStack, local_stack
from evolvable.protocol.converters.rl_samples import RLSample, trajectory_to_samples
from evolvable.protocol.models import LLMCallStep, Trajectory
from evolvable.store import TrajectoryFilter
from evolvable.trainer.config import RLConfig
from evolvable.trainer.loop import run_training_job
from evolvable.trainer.loss import token_logprobs
from evolvable.trainer.publish import manifest_for, publish
from evolvable.trainer.samples import StoreSource

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def real_model() -> tuple[Any, Any]:
    from evolvable.model_loading import load_base_model

    return load_base_model()


@pytest.fixture(scope="module")
def recorded(
    real_model: tuple[Any, Any], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[LocalStack, list[Trajectory]]]:
    """Two support-desk episodes and one explicit two-turn session, all through the proxy."""
    from evolvable.workloads.support_desk.agent import run_episode
    from evolvable.workloads.support_desk.harnesses import default_harness
    from evolvable.workloads.support_desk.tasks import generate_tasks

    model, tokenizer = real_model
    with local_stack(model, tokenizer, tmp_path_factory.mktemp("stack")) as stack:
        client = openai.OpenAI(base_url=stack.proxy_v1, api_key="unused", max_retries=0, timeout=600)
        tasks = generate_tasks("train", 2, seed=11)

        def episode(task: Any) -> None:
            run_episode(
                client,
                "smollm2-135m",
                task,
                default_harness(),
                temperature=1.0,
                seed=5,
                proxy_session=True,
                max_tokens=24,
                max_turns=2,
            )

        def two_turns() -> None:
            session = httpx.post(f"{stack.proxy.url}/v1/sessions", json={"agent": "chat", "task_id": "chat-1"}).json()
            chat = openai.OpenAI(base_url=stack.proxy_v1, api_key=session["api_key"], max_retries=0, timeout=600)
            messages: list[dict[str, Any]] = [{"role": "user", "content": "Name a colour."}]
            for follow_up in ("And another one?", None):
                reply = chat.chat.completions.create(
                    model="smollm2-135m",
                    messages=messages,
                    temperature=1.0,
                    seed=3,
                    max_tokens=12,  # type: ignore[arg-type]
                )
                messages.append({"role": "assistant", "content": reply.choices[0].message.content or ""})
                if follow_up:
                    messages.append({"role": "user", "content": follow_up})
            httpx.post(
                f"{stack.proxy.url}/v1/sessions/{session['id']}/end", json={"status": "completed", "outcome": 1.0}
            )

        with ThreadPoolExecutor(3) as pool:
            for future in [pool.submit(episode, t) for t in tasks] + [pool.submit(two_turns)]:
                future.result()
        stack.flush()
        trajectories = list(stack.store.iter_trajectories(TrajectoryFilter()))
        yield stack, trajectories


def _samples(trajectories: list[Trajectory]) -> list[tuple[Trajectory, RLSample]]:
    return [(t, s) for t in trajectories for s in trajectory_to_samples(t)]


def test_samples_decode_to_exactly_the_recorded_text(recorded, real_model) -> None:
    _, tokenizer = real_model
    _, trajectories = recorded
    pairs = _samples(trajectories)
    assert len(trajectories) == 3 and len(pairs) >= 3
    assert max(len(s.step_ids) for _, s in pairs) >= 2 or any(len(t.llm_calls()) >= 2 for t in trajectories)
    checked = 0
    for trajectory, sample in pairs:
        steps = {s.id: s for s in trajectory.steps if isinstance(s, LLMCallStep)}
        for turn, step_id in enumerate(sample.step_ids):
            ids = [i for i, k in zip(sample.input_ids, sample.token_turn, strict=True) if k == turn]
            recorded_text = steps[step_id].choices[0].message.text()  # type: ignore[union-attr]
            assert tokenizer.decode(ids, skip_special_tokens=True) == recorded_text
            checked += 1
        # The context is the engine's prompt ids verbatim: never re-tokenized.
        first = steps[sample.step_ids[0]]
        assert sample.input_ids[: len(first.prompt_token_ids or [])] == first.prompt_token_ids
    assert checked >= 4


def test_recomputed_logprobs_match_behaviour_logprobs(recorded, real_model) -> None:
    model, _ = real_model
    _, trajectories = recorded
    for _, sample in _samples(trajectories):
        ids = torch.tensor([sample.input_ids])
        with torch.no_grad():
            recomputed = token_logprobs(model(input_ids=ids).logits, ids)[0]
        mask = torch.tensor(sample.loss_mask, dtype=torch.bool)
        behaviour = torch.tensor(sample.behaviour_logprobs)
        diff = (recomputed[mask] - behaviour[mask]).abs()
        assert float(diff.max()) < 1e-2 and float(diff.mean()) < 1e-3, (float(diff.max()), float(diff.mean()))
        # and the check can fail: shifting by one token breaks it
        shifted = (recomputed[1:][mask[:-1]] - behaviour[:-1][mask[:-1]]).abs()
        assert float(shifted.mean()) > 1e-2


def test_real_model_training_step_then_hot_load(recorded, tmp_path: Path) -> None:
    stack, _ = recorded
    config = RLConfig(
        base_model="smollm2-135m",
        lora_r=4,
        lora_alpha=8,
        lora_targets=["q_proj", "v_proj"],
        progress=False,
        rollout_batch_size=2,
        micro_batch_size=1,
        grad_accum_steps=2,
        output_dir=str(tmp_path / "job"),
        require_outcome=True,
        checkpoint_interval=0,
    )
    url = str(stack.store.engine.url).replace("***", "")
    result = run_training_job(config, StoreSource(url))
    assert result.sample_stats["samples"] >= 2 and result.optimizer_steps >= 1
    assert result.metrics["tokens_per_s"] > 0
    published = publish(
        result.adapter_dir, manifest_for(result, lora_name="rl-test"), servers=[stack.policy_server.url]
    )
    assert published.loaded == [stack.policy_server.url]
    models = httpx.get(f"{stack.policy_v1}/models").json()
    assert "rl-test" in [m["id"] for m in models["data"]]
    reply = httpx.post(
        f"{stack.policy_v1}/chat/completions",
        json={"model": "rl-test", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
        timeout=600,
    )
    assert reply.status_code == 200, reply.text
