"""Hostile input never reaches the spool: each finding of issue 15 reproduced, answered with a 4xx in the
OpenAI error shape, and capture of everyone else's traffic goes on (both backends where the store matters)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
from tests.proxy.conftest import ProxyServer, new_session

from evolvable.proxy.limits import InvalidInput, check_depth, check_storable
from evolvable.store import Store, TrajectoryFilter

CHAT = {"model": "mock", "messages": [{"role": "user", "content": "hi"}]}
POISON_TIMES = ["0001-01-01T00:00:00+05:00", "9999-12-31T23:00:00-05:00"]


def _auth(session: dict[str, Any]) -> dict[str, str]:
    return {"Authorization": f"Bearer {session['api_key']}"}


def _refused(r: httpx.Response, status: int, code: str | None = None) -> None:
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["message"] and error["type"] == "invalid_request_error"
    if code is not None:
        assert error["code"] == code


def _nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = {"a": value}
    return value


def _status(proxy: ProxyServer) -> dict[str, Any]:
    return httpx.get(f"{proxy.url}/v1/proxy/status").json()


@pytest.mark.parametrize("started_at", POISON_TIMES)
def test_poison_step_timestamps_are_refused_and_capture_goes_on(
    proxy: ProxyServer, store: Store, started_at: str
) -> None:
    session = new_session(proxy)
    step = {"kind": "tool_call", "tool_name": "t", "arguments": {}, "started_at": started_at}
    r = httpx.post(f"{proxy.url}/v1/sessions/{session['id']}/steps", json=step, headers=_auth(session))
    _refused(r, 400)
    assert "timestamp" in r.json()["error"]["message"]
    ok = httpx.post(f"{proxy.url}/v1/chat/completions", json=CHAT, headers=_auth(session))
    assert ok.status_code == 200
    proxy.flush()
    assert len(store.get_trajectory(session["id"]).steps) == 1
    status = _status(proxy)
    assert status["writer_failures"] == 0 and status["records_dropped"] == 0


def test_fields_capture_cannot_store_are_refused(proxy: ProxyServer, store: Store) -> None:
    url = f"{proxy.url}/v1/chat/completions"
    session = new_session(proxy)
    _refused(httpx.post(url, json={**CHAT, "model": 123}), 400, "invalid_field")
    _refused(httpx.post(url, json={**CHAT, "tools": "abc"}), 400, "invalid_field")
    _refused(httpx.post(url, json={**CHAT, "user": {"id": 1}}), 400, "invalid_field")
    _refused(httpx.post(url, json={"model": "mock", "messages": [{"content": "no role"}]}), 400, "invalid_field")
    signals = f"{proxy.url}/v1/sessions/{session['id']}/signals"
    for value in ("nan", "inf", "-Infinity"):
        _refused(
            httpx.post(signals, json={"signals": [{"kind": "rating", "value": value}]}, headers=_auth(session)), 400
        )
    end = f"{proxy.url}/v1/sessions/{session['id']}/end"
    _refused(httpx.post(end, json={"status": "completed", "outcome": "nan"}, headers=_auth(session)), 400)
    proxy.flush()
    assert store.count(TrajectoryFilter()) == 1
    assert store.get_trajectory(session["id"]).signals == []
    assert _status(proxy)["writer_failures"] == 0


def test_deep_nesting_is_a_400_everywhere(lite_proxy: ProxyServer) -> None:
    deep = _nested(256)
    session = new_session(lite_proxy)
    chat = {**CHAT, "metadata": deep}
    _refused(httpx.post(f"{lite_proxy.url}/v1/chat/completions", json=chat), 400, "invalid_field")
    _refused(httpx.post(f"{lite_proxy.url}/v1/sessions", json={"agent": "a", "metadata": deep}), 400)
    _refused(httpx.post(f"{lite_proxy.url}/v1/sessions", json={"agent": "a", "task_input": deep}), 400)
    step = {"kind": "tool_call", "tool_name": "t", "arguments": deep}
    _refused(httpx.post(f"{lite_proxy.url}/v1/sessions/{session['id']}/steps", json=step, headers=_auth(session)), 400)


@pytest.fixture
def small_body_proxy(proxy_factory: Any, sqlite_store: Store) -> ProxyServer:
    return proxy_factory(sqlite_store, config={"max_body_bytes": 10_000})


def _chunks(total: int) -> Iterator[bytes]:
    """A body without a content-length (chunked): the limit must hold while reading, not from the header."""
    yield b'{"agent": "a", "task_input": "'
    for _ in range(total // 1000):
        yield b"x" * 1000
    yield b'"}'


def test_body_limit_holds_on_every_endpoint(small_body_proxy: ProxyServer) -> None:
    base = small_body_proxy.url
    session = new_session(small_body_proxy)
    big = "x" * 20_000
    _refused(httpx.post(f"{base}/v1/sessions", json={"agent": "a", "task_input": big}), 413, "body_too_large")
    step = {"kind": "tool_call", "tool_name": "t", "arguments": {"x": big}}
    _refused(httpx.post(f"{base}/v1/sessions/{session['id']}/steps", json=step, headers=_auth(session)), 413)
    signal = {"signals": [{"kind": "rating", "value": 1, "label": big}]}
    _refused(httpx.post(f"{base}/v1/sessions/{session['id']}/signals", json=signal, headers=_auth(session)), 413)
    chat = {"model": "mock", "messages": [{"role": "user", "content": big}]}
    _refused(httpx.post(f"{base}/v1/chat/completions", json=chat), 413, "body_too_large")
    r = httpx.post(f"{base}/v1/sessions", content=_chunks(50_000), headers={"content-type": "application/json"})
    _refused(r, 413, "body_too_large")
    assert httpx.post(f"{base}/v1/sessions", json={"agent": "a"}).status_code == 201


def test_oversized_upstream_reply_is_cut_off_and_recorded(proxy_factory: Any, store: Store) -> None:
    proxy = proxy_factory(store, config={"max_upstream_reply_bytes": 4_000})
    session = new_session(proxy)
    long = {"model": "mock", "messages": [{"role": "user", "content": "word " * 2_000}]}
    for stream in (False, True):
        r = httpx.post(f"{proxy.url}/v1/chat/completions", json={**long, "stream": stream}, headers=_auth(session))
        if stream:
            assert r.status_code == 200 and "upstream_reply_too_large" in r.text
        else:
            assert r.status_code == 502 and r.json()["error"]["code"] == "upstream_reply_too_large"
    ok = httpx.post(f"{proxy.url}/v1/chat/completions", json=CHAT, headers=_auth(session))
    assert ok.status_code == 200
    proxy.flush()
    steps = store.get_trajectory(session["id"]).steps
    assert [s.error.type if s.error else None for s in steps] == [
        "upstream_reply_too_large",
        "upstream_reply_too_large",
        None,
    ]


def test_session_cache_keeps_no_large_payloads(lite_proxy: ProxyServer, sqlite_store: Store) -> None:
    large = "ticket " * 200_000
    metadata = {"cluster": "refunds", "notes": "n" * 100_000}
    session = new_session(lite_proxy, task_input=large, metadata=metadata)
    small = new_session(lite_proxy, task_input="short ticket", metadata={"cluster": "billing"})
    cached = lite_proxy.runtime.sessions.cached_by_id(session["id"])
    assert cached is not None and cached.task_input is None and cached.metadata == {"cluster": "refunds"}
    kept = lite_proxy.runtime.sessions.cached_by_id(small["id"])
    assert kept.task_input == "short ticket" and kept.metadata == {"cluster": "billing"}
    lite_proxy.flush()
    stored = sqlite_store.get_trajectory(session["id"])
    assert stored.task_input == large and stored.metadata == metadata


def test_limit_helpers() -> None:
    check_depth(_nested(63))
    with pytest.raises(InvalidInput):
        check_depth(_nested(65))
    check_storable({"a": [1.0, 2]})
    with pytest.raises(InvalidInput, match=r"body\.a\[1\]"):
        check_storable({"a": [1.0, float("nan")]})


def test_the_depth_check_skips_the_walk_only_when_the_text_cannot_nest_deep_enough() -> None:
    """With the body's text, a body with at most 64 `{`/`[` passes without a walk; any other is walked, so what is
    too deep is refused whether or not the text came along (braces inside strings only ever add to the count)."""
    for depth in (63, 64, 65, 200):
        body = {"messages": [{"role": "user", "content": "x"}], "metadata": _nested(depth - 1)}
        raw = orjson.dumps(body)
        walked_refuses = _refuses(lambda b=body: check_depth(b))
        assert _refuses(lambda b=body, r=raw: check_depth(b, raw=r)) == walked_refuses == (depth > 64)
    shallow_but_braced = {"content": "{[" * 100, "tools": [{"a": {"b": 1}}]}
    check_depth(shallow_but_braced, raw=orjson.dumps(shallow_but_braced))  # counted past 64: walked, and fine
    wide = {"messages": [{"role": "user", "content": str(i)} for i in range(500)]}
    check_depth(wide, raw=orjson.dumps(wide))


def _refuses(check: Any) -> bool:
    try:
        check()
    except InvalidInput:
        return True
    return False
