"""OpenAI-style error bodies: `{"error": {"message", "type", "code"}}`, the shape every OpenAI client parses."""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import HTTPException
from fastapi.responses import Response


def error_body(message: str, error_type: str, code: str | None = None, param: str | None = None) -> bytes:
    return orjson.dumps({"error": {"message": message, "type": error_type, "code": code or error_type, "param": param}})


class APIError(HTTPException):
    """Raise from a FastAPI route; the app renders it as an OpenAI-style error."""

    def __init__(self, status_code: int, message: str, error_type: str, code: str | None = None) -> None:
        super().__init__(status_code=status_code, detail=message)
        self.error_type, self.code, self.message = error_type, code or error_type, message


def error_response(
    status_code: int, message: str, error_type: str, code: str | None = None, **headers: Any
) -> Response:
    return Response(
        error_body(message, error_type, code), status_code=status_code, media_type="application/json", headers=headers
    )
