"""End to end on the real embedded model: support-desk tickets (each carries the customer's email) through the
proxy with governance on and the embedded tokenizer registered, as the demo wires it. Every stored llm_call
keeps token ids; they decode to the stored, redacted text; no email is decodable; RL samples come out."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest
from tokenizers import Tokenizer

from evolvable.demo.services import ProxyServer, embedded_tokenizers, policy_server
from evolvable.governance import Governance
from evolvable.model_loading import cached_model_dir
from evolvable.protocol.converters.rl_samples import trajectory_to_samples
from evolvable.protocol.models import Trajectory
from evolvable.proxy.app import create_app
from evolvable.proxy.config import ProxyConfig
from evolvable.store import Store, TrajectoryFilter

pytestmark = pytest.mark.slow

MODEL = "smollm2-135m"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[list[Any], list[Trajectory]]]:
    from evolvable.workloads.support_desk.agent import run_episode
    from evolvable.workloads.support_desk.harnesses import default_harness
    from evolvable.workloads.support_desk.tasks import generate_tasks

    work = tmp_path_factory.mktemp("governed")
    store = Store.open(f"sqlite:///{work / 'store.db'}")
    tasks = generate_tasks("train", 3, seed=3)
    try:
        with policy_server(MODEL, work / "policy_server.log", max_batch=4) as endpoint:
            gov = Governance.for_store(store, admin_key="", tokenizers=embedded_tokenizers(MODEL))
            config = ProxyConfig.for_upstream(endpoint, writer_mode="thread", spool_dir=work / "spool")
            app = create_app(config, store, governor=gov.governor, authenticator=gov.authenticator)
            gov.install(app)
            with ProxyServer(app) as proxy:
                client = openai.OpenAI(base_url=proxy.v1, api_key="unused", max_retries=0, timeout=600)
                for task in tasks:
                    run_episode(
                        client,
                        MODEL,
                        task,
                        default_harness(),
                        temperature=1.0,
                        seed=5,
                        proxy_session=True,
                        max_tokens=32,
                        max_turns=2,
                    )
                proxy.flush()
        yield tasks, list(store.iter_trajectories(TrajectoryFilter()))
    finally:
        store.close()


def test_governed_trajectories_keep_redacted_token_ids(recorded: tuple[list[Any], list[Trajectory]]) -> None:
    tasks, trajectories = recorded
    tokenizer = Tokenizer.from_file(str(cached_model_dir(MODEL) / "tokenizer.json"))
    emails = [task.customer.email for task in tasks]
    assert len(trajectories) == len(tasks)
    calls = [call for t in trajectories for call in t.llm_calls()]
    redacted = [call for call in calls if call.metadata.get("token_ids_redacted")]
    assert calls and len(redacted) >= len(tasks), "every ticket's first call carried the customer's email"
    for call in calls:
        assert call.has_token_ids, call.metadata
        prompt = tokenizer.decode(call.prompt_token_ids or [], skip_special_tokens=False)
        for message in call.request_messages:
            assert message.text().strip() in prompt  # the stored (redacted) messages, placeholders and all
        for choice in call.choices:
            completion = tokenizer.decode(choice.completion_token_ids or [], skip_special_tokens=True)
            assert completion == (choice.message.content if choice.message else choice.text)
            assert len(choice.logprobs or []) == len(choice.completion_token_ids or [])
        decoded = prompt + tokenizer.decode(call.choices[0].completion_token_ids or [], skip_special_tokens=False)
        assert not any(email in decoded for email in emails)
        assert "<EMAIL_" in prompt or call not in redacted
    for trajectory in trajectories:
        assert not any(email in trajectory.model_dump_json() for email in emails)
        samples = trajectory_to_samples(trajectory)
        assert samples and all(s.num_generated > 0 for s in samples)


def test_the_demo_wiring_serves_the_embedded_tokenizer_to_adapters_too(recorded: Any) -> None:
    registry = embedded_tokenizers(MODEL)  # the policy server has written its cache by now
    assert registry.codec_for(MODEL) is not None and registry.codec_for("a-lora-adapter") is not None
