"""The one exception tree and its one handler: status and code on the classes, each protocol's shape."""

from __future__ import annotations

import aiohttp
import orjson
import pytest
from fastapi import APIRouter, FastAPI
from fastapi.testclient import TestClient
from pydantic import BaseModel

from evolvable.errors import (
    EvolvableError,
    Forbidden,
    HTTPError,
    InvalidRequest,
    NotFound,
    ResourceNotFound,
    Unauthenticated,
    UpstreamError,
    map_exceptions,
)
from evolvable.http_errors import ErrorShapedRoute, install_error_handler


def test_the_classes_carry_status_type_and_code_and_an_instance_may_override_them() -> None:
    assert (Unauthenticated("x").status, Unauthenticated("x").code) == (401, "invalid_api_key")
    assert (Forbidden("x").status, Forbidden("x").error_type) == (403, "permission_error")
    assert ResourceNotFound("x", code="session_not_found").code == "session_not_found"
    teapot = HTTPError("short and stout", status=418)
    assert (teapot.status, teapot.error_type, teapot.code) == (418, "invalid_request_error", None)
    assert HTTPError("down", status=503).error_type == "server_error"
    assert HTTPError("who", status=401).error_type == "authentication_error"
    assert isinstance(InvalidRequest("x"), EvolvableError)


def test_map_exceptions_translates_the_first_matching_kind_and_passes_ours_through() -> None:
    mapping = {
        TimeoutError: lambda err: UpstreamError(f"slow: {err}", status_code=504),
        OSError: lambda err: UpstreamError(f"io: {err}"),
    }
    with pytest.raises(UpstreamError, match="slow") as caught, map_exceptions(mapping):
        raise TimeoutError("5 s")  # a TimeoutError is also an OSError: the first key wins
    assert caught.value.status_code == 504 and isinstance(caught.value.__cause__, TimeoutError)
    with pytest.raises(NotFound), map_exceptions({Exception: lambda err: UpstreamError("no")}):
        raise NotFound("ours, unchanged")
    with pytest.raises(KeyError), map_exceptions(mapping):
        raise KeyError("unmapped, unchanged")


async def test_an_aiohttp_failure_becomes_an_upstream_error_at_the_client() -> None:
    from evolvable.proxy.config import UpstreamConfig
    from evolvable.proxy.upstream import UpstreamClient

    upstream = UpstreamConfig(name="gone", base_url="http://127.0.0.1:9/v1")
    client = UpstreamClient([upstream])
    try:
        with pytest.raises(UpstreamError) as caught:
            await client.post(upstream, "/chat/completions", b"{}", {})
    finally:
        await client.close()
    assert caught.value.status_code == 502 and caught.value.error_type == "upstream_unreachable"
    assert isinstance(caught.value.__cause__, aiohttp.ClientError)


class _Body(BaseModel):
    n: int


def _app(**handler_options: object) -> TestClient:
    app = FastAPI()
    install_error_handler(app, **handler_options)  # type: ignore[arg-type]

    @app.get("/refused")
    async def refused() -> None:
        raise ResourceNotFound("no such thing", code="thing_not_found")

    @app.post("/typed")
    async def typed(body: _Body) -> dict[str, int]:
        return {"n": body.n}

    @app.get("/domain")
    async def domain() -> None:
        raise NotFound("store says no")

    return TestClient(app, raise_server_exceptions=False)


def test_one_handler_renders_the_tree_in_openai_shape() -> None:
    client = _app()
    r = client.get("/refused")
    assert r.status_code == 404
    assert r.json() == {
        "error": {"message": "no such thing", "type": "invalid_request_error", "code": "thing_not_found", "param": None}
    }
    bad = client.post("/typed", json={"n": "many"})
    assert bad.status_code == 400 and bad.json()["error"]["message"].startswith("invalid request: body.n")
    assert client.get("/domain").status_code == 500  # no translation registered: not ours to excuse


def test_a_protocol_renderer_and_a_translation_are_the_apps_choice() -> None:
    def anthropic_shape(err: HTTPError) -> bytes:
        return orjson.dumps({"type": "error", "error": {"type": err.error_type, "message": err.message}})

    client = _app(render=anthropic_shape, translate=lambda err: ResourceNotFound(str(err)))
    assert client.get("/refused").json() == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "no such thing"},
    }
    domain = client.get("/domain")
    assert domain.status_code == 404 and domain.json()["error"]["message"] == "store says no"


def test_an_error_shaped_router_renders_in_an_app_without_handlers() -> None:
    router = APIRouter(route_class=ErrorShapedRoute)

    @router.get("/admin")
    async def admin() -> None:
        raise Forbidden("admins only", code="admin_required")

    app = FastAPI()
    app.include_router(router)
    r = TestClient(app).get("/admin")
    assert r.status_code == 403
    assert r.json()["error"] == {
        "message": "admins only",
        "type": "permission_error",
        "code": "admin_required",
        "param": None,
    }
