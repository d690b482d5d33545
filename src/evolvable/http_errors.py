"""The one HTTP error handler: an `HTTPError` (errors.py) rendered in the shape of the protocol spoken.

Every app calls `install_error_handler(app, render=...)` once; routers that may be mounted in any app
(control, governance) use `ErrorShapedRoute`, which renders the same way. Third-party and domain
errors are translated into `HTTPError` where they are caught (`translate`), never rendered ad hoc.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from fastapi.routing import APIRoute
from pydantic import ValidationError

from evolvable.errors import EvolvableError, HTTPError, InvalidRequest

Render = Callable[[HTTPError], bytes]
"""An error as the body of one protocol's error reply."""

Translate = Callable[[Exception], HTTPError]


def openai_error_body(message: str, error_type: str, code: str | None = None, param: str | None = None) -> bytes:
    """OpenAI's shape, `{"error": {"message", "type", "code", "param"}}`, the one every OpenAI client parses."""
    return orjson.dumps({"error": {"message": message, "type": error_type, "code": code or error_type, "param": param}})


def openai_shape(err: HTTPError) -> bytes:
    return openai_error_body(err.message, err.error_type, err.code, err.param)


def error_response(err: HTTPError, render: Render = openai_shape, headers: dict[str, str] | None = None) -> Response:
    return Response(render(err), status_code=err.status, media_type="application/json", headers=headers)


def validation_reasons(err: ValidationError | RequestValidationError) -> str:
    """`loc: msg; ...` of a failed validation (the proxy's and the dashboard's 400 message)."""
    return "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in err.errors())


def _invalid_request(err: RequestValidationError) -> HTTPError:
    return InvalidRequest(f"invalid request: {validation_reasons(err)}")


def install_error_handler(
    app: FastAPI,
    *,
    render: Render = openai_shape,
    invalid: Callable[[RequestValidationError], HTTPError] = _invalid_request,
    translate: Translate | None = None,
) -> None:
    """Register the app's one error handler: `HTTPError` rendered by `render`, FastAPI's request
    validation as a 400 (`invalid`), and, when `translate` is given, every other `EvolvableError`."""

    async def handle(_: Request, exc: Exception) -> Response:
        if isinstance(exc, HTTPError):
            err = exc
        elif isinstance(exc, RequestValidationError):
            err = invalid(exc)
        else:
            assert translate is not None
            err = translate(exc)
        return error_response(err, render)

    app.add_exception_handler(HTTPError, handle)
    app.add_exception_handler(RequestValidationError, handle)
    if translate is not None:
        app.add_exception_handler(EvolvableError, handle)


class ErrorShapedRoute(APIRoute):
    """Renders an `HTTPError` from a route or a dependency in OpenAI's shape in whatever app mounts the
    router, so a router's errors do not depend on the app's handlers."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def handle(request: Request) -> Response:
            try:
                return await handler(request)
            except HTTPError as err:
                return error_response(err)

        return handle
