"""The proxy's behaviour at its edges: bad input, upstream failures, token capture modes, sessions,
hooks. On SQLite (the store is not the subject; tests/proxy/test_capture.py covers both backends)."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from typing import Any

import httpx
import openai
import pytest
from tests.proxy.conftest import ProxyServer, new_session
from tests.proxy.mock_upstream import MockUpstream

from evolvable.protocol.models import StepAppended, StepStatus, TrajectoryStatus
from evolvable.proxy.config import TokenCapture, UpstreamConfig
from evolvable.proxy.hooks import Principal, RewriteResult, SessionContext
from evolvable.store import Store, TrajectoryFilter

CHAT = {"model": "mock", "messages": [{"role": "user", "content": "hi"}]}


def _auth(session: dict) -> dict[str, str]:
    return {"Authorization": f"Bearer {session['api_key']}"}


def _error(r: httpx.Response, status: int, code: str | None = None) -> dict[str, Any]:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["message"] and err["type"]
    if code is not None:
        assert err["code"] == code
    assert "x-evolvable-overhead-ms" in r.headers or r.request.url.path != "/v1/chat/completions"
    return err


def test_bad_input_is_rejected_and_nothing_is_stored(proxy_factory: Any, sqlite_store: Store) -> None:
    proxy = proxy_factory(sqlite_store, config={"max_body_bytes": 10_000})
    url = f"{proxy.url}/v1/chat/completions"
    session = new_session(proxy)
    _error(httpx.post(url, content=b"{not json", headers={"content-type": "application/json"}), 400, "invalid_json")
    _error(httpx.post(url, json=[1, 2]), 400, "invalid_json")
    _error(httpx.post(url, json={"model": "mock"}), 400, "missing_messages")
    _error(httpx.post(url, json={"model": "mock", "messages": []}), 400, "missing_messages")
    _error(httpx.post(url, json=CHAT, headers={"X-Evolvable-Session": "traj_nope"}), 404, "session_not_found")
    _error(httpx.post(url, json=CHAT, headers={"Authorization": "Bearer evs_wrong"}), 401, "invalid_api_key")
    big = {"model": "mock", "messages": [{"role": "user", "content": "x" * 20_000}]}
    _error(httpx.post(url, json=big, headers=_auth(session)), 413, "body_too_large")
    _error(httpx.post(f"{proxy.url}/v1/completions", json={"model": "mock"}), 400, "missing_prompt")
    _error(httpx.post(f"{proxy.url}/v1/sessions/traj_nope/end", json={"status": "completed"}), 404, "session_not_found")
    _error(httpx.post(f"{proxy.url}/v1/sessions/{session['id']}/end", json={"status": "bogus"}), 400)
    _error(httpx.post(f"{proxy.url}/v1/sessions", content=b"[", headers={"content-type": "application/json"}), 400)
    _error(httpx.post(f"{proxy.url}/v1/sessions/{session['id']}/signals", json={"signals": [{"kind": "x"}]}), 400)
    _error(httpx.post(f"{proxy.url}/v1/sessions/{session['id']}/steps", json={"kind": "tool_call"}), 400)
    _error(httpx.get(f"{proxy.url}/v1/trajectories/traj_nope"), 404)
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{proxy.url}/v1", api_key="evs_wrong", max_retries=0).chat.completions.create(**CHAT)
    proxy.flush()
    t = sqlite_store.get_trajectory(session["id"])
    assert t.steps == [] and t.signals == [] and t.status == TrajectoryStatus.running
    assert sqlite_store.count(TrajectoryFilter()) == 1  # only the session itself


def test_upstream_failures_reach_the_client_and_become_failed_steps(proxy_factory: Any, sqlite_store: Store) -> None:
    proxy = proxy_factory(sqlite_store)
    url = f"{proxy.url}/v1/chat/completions"
    session = new_session(proxy)
    h = _auth(session)
    err = _error(httpx.post(url, json={**CHAT, "model": "error-500"}, headers=h), 500, "boom")
    assert err["message"] == "engine exploded"
    _error(httpx.post(url, json={**CHAT, "model": "malformed"}, headers=h), 502, "upstream_malformed_reply")
    _error(httpx.post(url, json={**CHAT, "model": "slow"}, headers=h, timeout=10), 504, "upstream_timeout")
    proxy.flush()
    steps = sqlite_store.get_trajectory(session["id"]).steps
    assert [(s.status, s.error.type, s.error.status_code) for s in steps] == [
        (StepStatus.error, "upstream_error", 500),
        (StepStatus.error, "upstream_malformed_reply", 502),
        (StepStatus.error, "upstream_timeout", 504),
    ]


def test_unreachable_upstream(proxy_factory: Any, sqlite_store: Store) -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    dead = sock.getsockname()[1]
    sock.close()
    proxy = proxy_factory(sqlite_store)
    proxy.runtime.config.upstreams[0].base_url = f"http://127.0.0.1:{dead}/v1"
    r = httpx.post(f"{proxy.url}/v1/chat/completions", json=CHAT)
    _error(r, 502, "upstream_unreachable")
    proxy.flush()
    t = sqlite_store.get_trajectory(r.headers["x-evolvable-trajectory-id"])
    assert t.status == TrajectoryStatus.failed and t.steps[0].error.type == "upstream_unreachable"


def test_token_capture_modes(proxy_factory: Any, sqlite_store: Store, upstream: MockUpstream) -> None:
    proxy = proxy_factory(sqlite_store)
    url = f"{proxy.url}/v1/chat/completions"
    # auto: an upstream that rejects the fields gets one retry without them, and is remembered.
    before = len(upstream.requests)
    assert httpx.post(url, json={**CHAT, "model": "reject-token-fields"}).status_code == 200
    assert httpx.post(url, json={**CHAT, "model": "reject-token-fields"}).status_code == 200
    sent = upstream.requests[before:]
    assert ["return_token_ids" in b for b in sent] == [True, False, False]
    assert proxy.runtime.upstream.state["mock"].accepts_token_fields is False
    proxy.runtime.upstream.state["mock"].accepts_token_fields = True
    # A client that asks for token ids and logprobs gets them.
    r = httpx.post(url, json={**CHAT, "return_token_ids": True, "logprobs": True}).json()
    assert r["prompt_token_ids"] and r["choices"][0]["token_ids"] and r["choices"][0]["logprobs"]["content"]
    # never: the request goes upstream untouched.
    proxy.runtime.config.upstreams[0].token_capture = TokenCapture.never
    httpx.post(url, json=CHAT)
    assert "return_token_ids" not in upstream.requests[-1] and "logprobs" not in upstream.requests[-1]
    # /v1/completions: legacy logprobs format is captured too.
    proxy.runtime.config.upstreams[0].token_capture = TokenCapture.auto
    r = httpx.post(f"{proxy.url}/v1/completions", json={"model": "mock", "prompt": "abc"})
    assert r.status_code == 200 and "token_ids" not in r.json()["choices"][0]
    proxy.flush()
    step = sqlite_store.get_trajectory(r.headers["x-evolvable-trajectory-id"]).steps[0]
    assert step.endpoint == "completions" and step.prompt == "abc" and step.choices[0].text == "completed: abc"
    assert step.choices[0].completion_token_ids == [7, 8] and step.choices[0].logprobs == [-0.3, -0.4]
    assert step.prompt_token_ids == [5, 6]


def test_client_disconnect_mid_stream_is_recorded(lite_proxy: ProxyServer, sqlite_store: Store) -> None:
    session = new_session(lite_proxy)
    with (
        httpx.Client(timeout=10) as client,
        client.stream(
            "POST",
            f"{lite_proxy.url}/v1/chat/completions",
            headers=_auth(session),
            json={**CHAT, "model": "stream-slow", "stream": True},
        ) as r,
    ):
        assert r.status_code == 200 and "x-evolvable-overhead-ms" in r.headers
        for _ in r.iter_bytes():
            break
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        lite_proxy.flush()
        steps = sqlite_store.get_trajectory(session["id"]).steps
        if steps:
            break
        time.sleep(0.1)
    assert steps[0].status == StepStatus.error and steps[0].error.type == "client_disconnected"
    assert steps[0].stream and steps[0].choices  # what was streamed before the disconnect is kept


def test_idle_sessions_are_abandoned_and_late_signals_accepted(proxy_factory: Any, sqlite_store: Store) -> None:
    proxy = proxy_factory(sqlite_store, config={"session_idle_timeout_s": 0.3, "idle_sweep_interval_s": 0.1})
    session = new_session(proxy)
    time.sleep(1.0)
    proxy.flush()
    t = sqlite_store.get_trajectory(session["id"])
    assert t.status == TrajectoryStatus.abandoned and t.metadata["end_reason"] == "idle_timeout"
    late = {"signals": [{"kind": "user_feedback", "value": -1, "label": "late"}]}
    signals = f"{proxy.url}/v1/sessions/{session['id']}/signals"
    assert httpx.post(signals, headers=_auth(session), json=late).status_code == 401  # its key died with it
    r = httpx.post(signals, json=late)  # the tenant's principal still adds late feedback
    assert r.status_code == 201, r.text
    proxy.flush()
    assert sqlite_store.get_trajectory(session["id"]).signals[0].label == "late"


class HarnessRewriter:
    """Applies a system prompt and routes the alias to a LoRA name, like the control plane will."""

    def __init__(self) -> None:
        self.contexts: list[SessionContext] = []

    async def prepare(self, ctx: SessionContext, body: dict[str, Any]) -> RewriteResult:
        self.contexts.append(ctx)
        messages = [{"role": "system", "content": "Be brief."}, *body.get("messages", [])]
        return RewriteResult(
            body={**body, "messages": messages}, harness_version="h1-abc", policy_version="lora-7", model="mock"
        )


class TenantAuth:
    def authenticate(self, bearer: str | None) -> Principal | None:
        return {"key-a": Principal("tenant-a"), "key-b": Principal("tenant-b")}.get(bearer or "")


class RedactingGovernor:
    def govern(self, events: list[Any], runs: object = None) -> list[Any]:
        for e in events:
            if isinstance(e, StepAppended) and e.step.kind == "llm_call":
                for m in e.step.request_messages:
                    if isinstance(m.content, str):
                        m.content = m.content.replace("secret", "<SECRET_1>")
        return events


def test_hooks_rewrite_govern_and_isolate_tenants(
    proxy_factory: Any, sqlite_store: Store, upstream: MockUpstream
) -> None:
    rewriter = HarnessRewriter()
    proxy = proxy_factory(sqlite_store, rewriter=rewriter, authenticator=TenantAuth(), governor=RedactingGovernor())
    a, b = {"Authorization": "Bearer key-a"}, {"Authorization": "Bearer key-b"}
    assert httpx.post(f"{proxy.url}/v1/sessions", json={"agent": "x"}).status_code == 401
    s = httpx.post(f"{proxy.url}/v1/sessions", json={"agent": "support", "task_input": "t"}, headers=a).json()
    assert (s["harness_version"], s["policy_version"]) == ("h1-abc", "lora-7")
    client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key=s["api_key"])
    client.chat.completions.create(model="support-agent", messages=[{"role": "user", "content": "my secret"}])
    assert upstream.requests[-1]["messages"][0] == {"role": "system", "content": "Be brief."}
    assert upstream.requests[-1]["model"] == "mock"
    assert rewriter.contexts[-1].session_id == s["id"] and rewriter.contexts[-1].tenant_id == "tenant-a"
    # The X-Evolvable-Session header works for the session's tenant only.
    ok = httpx.post(f"{proxy.url}/v1/chat/completions", json=CHAT, headers={**a, "X-Evolvable-Session": s["id"]})
    assert ok.status_code == 200
    _error(
        httpx.post(f"{proxy.url}/v1/chat/completions", json=CHAT, headers={**b, "X-Evolvable-Session": s["id"]}), 404
    )
    proxy.flush()
    t = sqlite_store.get_trajectory(s["id"])
    assert (t.tenant_id, t.harness_version, t.policy_version) == ("tenant-a", "h1-abc", "lora-7")
    first = t.llm_calls()[0]
    assert first.policy_version == "lora-7" and first.metadata["client_model"] == "support-agent"
    assert first.request_messages[1].content == "my <SECRET_1>"  # governed before storage
    assert httpx.get(f"{proxy.url}/v1/trajectories/{s['id']}", headers=a).status_code == 200
    _error(httpx.get(f"{proxy.url}/v1/trajectories/{s['id']}", headers=b), 404)
    assert httpx.get(f"{proxy.url}/v1/trajectories", headers=b).json()["data"] == []


def test_versions_learned_at_first_call_fill_the_header(proxy_factory: Any, sqlite_store: Store) -> None:
    class LateRewriter:
        def prepare(self, ctx: SessionContext, body: dict[str, Any]) -> RewriteResult:
            if ctx.call_index < 0:
                return RewriteResult(body=body)
            return RewriteResult(body=body, harness_version="h-late", policy_version="p-late")

    proxy = proxy_factory(sqlite_store, rewriter=LateRewriter())
    s = new_session(proxy)
    assert s["harness_version"] is None
    httpx.post(f"{proxy.url}/v1/chat/completions", json=CHAT, headers=_auth(s))
    proxy.flush()
    t = sqlite_store.get_trajectory(s["id"])
    assert (t.harness_version, t.policy_version) == ("h-late", "p-late")
    assert sqlite_store.count(TrajectoryFilter(harness_version="h-late")) == 1


def test_list_trajectories_filters_and_pages(lite_proxy: ProxyServer) -> None:
    for i in range(5):
        s = new_session(lite_proxy, agent="pager" if i % 2 == 0 else "other")
        if i < 2:
            httpx.post(f"{lite_proxy.url}/v1/sessions/{s['id']}/end", headers=_auth(s), json={"status": "failed"})
    page = httpx.get(f"{lite_proxy.url}/v1/trajectories", params={"agent": "pager", "limit": 2}).json()
    assert len(page["data"]) == 2 and page["next_cursor"]
    rest = httpx.get(
        f"{lite_proxy.url}/v1/trajectories", params={"agent": "pager", "limit": 2, "cursor": page["next_cursor"]}
    ).json()
    assert len(rest["data"]) == 1 and rest["next_cursor"] is None
    failed = httpx.get(f"{lite_proxy.url}/v1/trajectories", params={"status": "failed"}).json()["data"]
    assert len(failed) == 2
    _error(httpx.get(f"{lite_proxy.url}/v1/trajectories", params={"cursor": "garbage"}), 400)


def test_models_lists_upstream_and_aliases(lite_proxy: ProxyServer) -> None:
    ids = [m.id for m in openai.OpenAI(base_url=f"{lite_proxy.url}/v1", api_key="x").models.list()]
    assert "mock" in ids and "alias-a" in ids


def test_many_concurrent_sessions_are_kept_apart(lite_proxy: ProxyServer, sqlite_store: Store) -> None:
    sessions = [new_session(lite_proxy, task_id=f"t{i}") for i in range(8)]

    async def episode(s: dict) -> None:
        client = openai.AsyncOpenAI(base_url=f"{lite_proxy.url}/v1", api_key=s["api_key"])
        for turn in range(3):
            await client.chat.completions.create(
                model="alias-a", messages=[{"role": "user", "content": f"{s['id']} {turn}"}]
            )
        await client.close()

    async def all_episodes() -> None:
        await asyncio.gather(*(episode(s) for s in sessions))

    asyncio.run(all_episodes())
    lite_proxy.flush()
    for s in sessions:
        t = sqlite_store.get_trajectory(s["id"])
        assert [str(st.request_messages[0].content) for st in t.llm_calls()] == [f"{s['id']} {i}" for i in range(3)]


def test_config_files(tmp_path: Any) -> None:
    from evolvable.proxy.config import ConfigError, load_config

    (tmp_path / "p.yaml").write_text(
        "upstreams:\n  - {name: vllm, base_url: 'http://h:8000/v1', token_capture: always, timeout_s: 30}\n"
        "  - {name: openai, base_url: 'https://api.example/v1', api_key_env: OPENAI_API_KEY, token_capture: never}\n"
        "models:\n  support-agent: {upstream: vllm, model: lora-7}\n  gpt: openai\n"
        "session_idle_timeout_s: 60\nmax_body_bytes: 1000\n"
    )
    cfg = load_config(tmp_path / "p.yaml").validate()
    assert cfg.upstream("vllm").token_capture == TokenCapture.always and cfg.upstream("vllm").timeout_s == 30
    assert cfg.models["support-agent"].served_model == "lora-7" and cfg.models["gpt"].upstream == "openai"
    assert cfg.upstream(None).name == "vllm" and cfg.max_body_bytes == 1000
    assert UpstreamConfig("x", "http://h/v1").url("/v1/models") == "http://h/v1/models"
    assert UpstreamConfig("x", "http://h").url("/v1/models") == "http://h/v1/models"
    (tmp_path / "p.toml").write_text('[[upstreams]]\nname = "a"\nbase_url = "http://a"\n[models]\nm = "a"\n')
    assert load_config(tmp_path / "p.toml").validate().models["m"].upstream == "a"
    (tmp_path / "bad.yaml").write_text("upstreams: []\ntypo_key: 1\n")
    with pytest.raises(ConfigError, match="typo_key"):
        load_config(tmp_path / "bad.yaml")
    (tmp_path / "bad2.yaml").write_text("upstreams:\n  - {name: a, base_url: 'http://a'}\nmodels: {m: nowhere}\n")
    with pytest.raises(ConfigError, match="unknown upstream"):
        load_config(tmp_path / "bad2.yaml").validate()


def test_every_response_carries_the_overhead_header(lite_proxy: ProxyServer) -> None:
    for r in (
        httpx.post(f"{lite_proxy.url}/v1/sessions", json={"agent": "x"}),
        httpx.get(f"{lite_proxy.url}/v1/trajectories"),
        httpx.get(f"{lite_proxy.url}/v1/models"),
        httpx.get(f"{lite_proxy.url}/v1/nope"),
        httpx.post(f"{lite_proxy.url}/v1/chat/completions", json=CHAT),
    ):
        assert float(r.headers["x-evolvable-overhead-ms"]) >= 0, r.url


def test_a_session_key_reads_only_its_own_run(lite_proxy: ProxyServer) -> None:
    mine, other = new_session(lite_proxy), new_session(lite_proxy)
    assert httpx.get(f"{lite_proxy.url}/v1/trajectories/{mine['id']}", headers=_auth(mine)).status_code == 200
    _error(httpx.get(f"{lite_proxy.url}/v1/trajectories/{other['id']}", headers=_auth(mine)), 404)
    listed = httpx.get(f"{lite_proxy.url}/v1/trajectories", headers=_auth(mine)).json()["data"]
    assert [t["id"] for t in listed] == [mine["id"]]


def test_odd_messages_do_not_lose_the_call(lite_proxy: ProxyServer, sqlite_store: Store) -> None:
    body = {"model": "mock", "messages": [{"role": "ipython", "content": "x"}, {"role": "user", "content": "hi"}]}
    r = httpx.post(f"{lite_proxy.url}/v1/chat/completions", json=body)
    assert r.status_code == 200
    lite_proxy.flush()
    step = sqlite_store.get_trajectory(r.headers["x-evolvable-trajectory-id"]).steps[0]
    assert [m.role for m in step.request_messages] == ["user"] and step.metadata["unparsed_messages"] == 1


def test_writer_in_a_thread_captures_the_same(proxy_factory: Any, sqlite_store: Store) -> None:
    proxy = proxy_factory(sqlite_store, config={"writer_mode": "thread"})
    session = new_session(proxy)
    client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key=session["api_key"])
    client.chat.completions.create(model="mock", messages=[{"role": "user", "content": "hi"}])
    httpx.post(f"{proxy.url}/v1/sessions/{session['id']}/end", headers=_auth(session), json={"status": "completed"})
    proxy.flush()
    t = sqlite_store.get_trajectory(session["id"])
    assert t.status == TrajectoryStatus.completed and len(t.llm_calls()) == 1
    assert httpx.get(f"{proxy.url}/v1/proxy/status").json()["writer_mode"] == "thread"


@pytest.mark.parametrize("writer_mode", ["process", "thread"])
def test_read_your_writes_wakes_a_writer_sleeping_between_batches(
    proxy_factory: Any, sqlite_store: Store, writer_mode: str
) -> None:
    """The writer sleeps `writer_idle_s` between batches of a trickle (fewer wake-ups beside the calls). A read
    that needs the call in the store wakes it: with an hour's sleep the call is still stored at once."""
    proxy = proxy_factory(sqlite_store, config={"writer_mode": writer_mode, "writer_idle_s": 3600.0})
    time.sleep(0.3)  # the writer found the spool empty and went to sleep
    client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key="unused")
    reply = client.chat.completions.with_raw_response.create(model="mock", messages=[{"role": "user", "content": "hi"}])
    trajectory_id = reply.headers["x-evolvable-trajectory-id"]
    r = httpx.get(f"{proxy.url}/v1/trajectories/{trajectory_id}", timeout=30)  # the API's read-your-writes
    assert r.status_code == 200, r.text
    assert len(sqlite_store.get_trajectory(trajectory_id).llm_calls()) == 1


MALFORMED = (
    "malformed-utf8",
    "malformed-no-choices",
    "malformed-null-choices",
    "malformed-trailing",
    "malformed-array",
    "malformed-nan",
)


def test_every_unusable_reply_is_a_502_and_a_failed_step(proxy_factory: Any, sqlite_store: Store) -> None:
    """The hot path checks a passed-through reply's shape without parsing it: the verdict must stay that of a parse
    (invalid UTF-8 inside a string, trailing bytes, NaN, no `choices` array: all refused), never a 200."""
    proxy = proxy_factory(sqlite_store)
    session = new_session(proxy)
    for model in MALFORMED:
        r = httpx.post(f"{proxy.url}/v1/chat/completions", json={**CHAT, "model": model}, headers=_auth(session))
        _error(r, 502, "upstream_malformed_reply")
    proxy.flush()
    steps = sqlite_store.get_trajectory(session["id"]).steps
    assert [(s.status, s.error.type) for s in steps] == [(StepStatus.error, "upstream_malformed_reply")] * len(
        MALFORMED
    )


def test_a_reply_in_utf8_passes_byte_for_byte_and_is_captured(proxy_factory: Any, sqlite_store: Store) -> None:
    from tests.proxy.mock_upstream import UNICODE_CHOICE

    proxy = proxy_factory(sqlite_store)
    r = httpx.post(f"{proxy.url}/v1/chat/completions", json={**CHAT, "model": "unicode-reply"})
    assert r.status_code == 200
    assert (
        r.content
        == json.dumps(
            {"id": "chatcmpl-u", "object": "chat.completion", "model": "unicode-reply", "choices": [UNICODE_CHOICE]},
            ensure_ascii=False,
        ).encode()
    )
    proxy.flush()
    (step,) = sqlite_store.get_trajectory(r.headers["x-evolvable-trajectory-id"]).steps
    assert step.status == StepStatus.ok and step.choices[0].message.content == UNICODE_CHOICE["message"]["content"]
