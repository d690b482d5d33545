"""`POST /v1/embeddings` through the proxy with the real `openai` client: passed through, usage recorded."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from tests.proxy.conftest import ProxyServer, new_session

from evolvable.proxy.app import create_app
from evolvable.proxy.config import ModelAlias, ProxyConfig, UpstreamConfig
from evolvable.store import Store, TrajectoryFilter


class EmbeddingsUpstream:
    """An OpenAI-compatible embeddings server: 3-dimensional vectors; model `broken` answers 400."""

    def __init__(self) -> None:
        self.requests: list[tuple[dict[str, str], dict[str, Any]]] = []
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                upstream.requests.append(({k.lower(): v for k, v in self.headers.items()}, body))
                inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
                if body["model"] == "broken":
                    status, answer = 400, {"error": {"message": "no such model", "type": "invalid_request_error"}}
                else:
                    status, answer = (
                        200,
                        {
                            "object": "list",
                            "model": body["model"],
                            "data": [
                                {"object": "embedding", "index": i, "embedding": [0.1, 0.2, float(i)]}
                                for i in range(len(inputs))
                            ],
                            "usage": {"prompt_tokens": 4 * len(inputs), "total_tokens": 4 * len(inputs)},
                        },
                    )
                raw = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"


@pytest.fixture
def embedding_proxy(store: Store, tmp_path: Path) -> Iterator[tuple[ProxyServer, EmbeddingsUpstream]]:
    upstream = EmbeddingsUpstream()
    config = ProxyConfig(
        upstreams=[UpstreamConfig(name="embedder", base_url=upstream.url, timeout_s=5.0)],
        models={"embed": ModelAlias(upstream="embedder", served_model="text-embedding-3-small")},
        spool_dir=tmp_path / "spool",
    )
    server = ProxyServer(create_app(config, store)).start()
    yield server, upstream
    server.stop()
    upstream.server.shutdown()
    upstream.server.server_close()


def test_a_session_embeddings_call_passes_through_and_records_its_usage(
    embedding_proxy: tuple[ProxyServer, EmbeddingsUpstream],
) -> None:
    server, upstream = embedding_proxy
    session = new_session(server)
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key=session["api_key"])
    result = client.embeddings.create(model="embed", input=["refund policy", "shipping times"])
    assert [d.embedding for d in result.data] == [[0.1, 0.2, 0.0], [0.1, 0.2, 1.0]]
    headers, sent = upstream.requests[-1]
    assert sent["model"] == "text-embedding-3-small" and sent["input"] == ["refund policy", "shipping times"]
    assert session["api_key"] not in headers.get("authorization", "")  # Evolvable keys never go upstream
    server.flush()
    (step,) = server.runtime.store.get_trajectory(session["id"]).steps
    assert step.kind == "skill_use" and step.skill_name == "embeddings" and step.agent == "tester"
    assert step.input == {"model": "text-embedding-3-small", "inputs": 2}
    assert step.output["usage"] == {"prompt_tokens": 8, "total_tokens": 8}
    assert "refund policy" not in step.model_dump_json()


def test_a_call_outside_a_session_passes_through_unrecorded(
    embedding_proxy: tuple[ProxyServer, EmbeddingsUpstream],
) -> None:
    server, _ = embedding_proxy
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="sk-anything")
    result = client.embeddings.create(model="embed", input="hello", encoding_format="float")
    assert result.data[0].embedding == [0.1, 0.2, 0.0] and result.usage.prompt_tokens == 4
    server.flush()
    assert server.runtime.store.count(TrajectoryFilter()) == 0


def test_upstream_errors_pass_through_and_bad_requests_get_400(
    embedding_proxy: tuple[ProxyServer, EmbeddingsUpstream],
) -> None:
    server, _ = embedding_proxy
    session = new_session(server)
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key=session["api_key"], max_retries=0)
    with pytest.raises(openai.BadRequestError, match="no such model"):
        client.embeddings.create(model="broken", input="x")
    bad = httpx.post(
        f"{server.url}/v1/embeddings", content=b"{", headers={"authorization": f"Bearer {session['api_key']}"}
    )
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_json"
    no_input = httpx.post(f"{server.url}/v1/embeddings", json={"model": "embed"})
    assert no_input.status_code == 400 and "input" in no_input.json()["error"]["message"]
    server.flush()
    assert server.runtime.store.get_trajectory(session["id"]).steps == []
