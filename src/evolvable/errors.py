"""The one exception tree of Evolvable. Third-party errors are translated at the boundary.

EvolvableError
├── ProtocolError          invalid ATDP data (carries readable, located reasons)
├── ConversionError        an input cannot be converted to or from ATDP
├── StoreError             the store cannot be opened, migrated or written
│   ├── NotFound           a record does not exist (or belongs to another tenant)
│   └── UnmigratedTables   the code declares tables no migration creates (the store will not open)
├── GovernanceError        redaction, consent, retention or purge failed
│   └── RedactionFailed    a redaction stage raised; content is stored as a marker
├── UpstreamError          the model server failed, timed out or answered nonsense
├── ControlError           the control plane refused or failed an action
├── TrainingError          a training job cannot run or failed
└── HTTPError              a request refused or failed: HTTP status, error type and code on the class
    ├── InvalidRequest         400 invalid_request_error
    ├── Unauthenticated        401 invalid_api_key
    ├── Forbidden              403 permission_error
    ├── ResourceNotFound       404 not_found
    ├── Conflict               409
    ├── PayloadTooLarge        413 body_too_large
    ├── Unavailable            503
    └── (proxy/wire/base.py) WireError: a wire protocol's own refusal, with the offending `param`

Every app renders an `HTTPError` with one handler (`evolvable.http_errors`), in the shape of the
protocol the request spoke (OpenAI's `{"error": {...}}`, Anthropic's `{"type": "error", ...}`).
`map_exceptions` translates third-party errors (aiohttp, SQLAlchemy, pydantic) into this tree at
the boundary where they are caught, as httpx does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import TracebackType


class EvolvableError(Exception):
    """Base of every error Evolvable raises on purpose."""


class ProtocolError(EvolvableError):
    def __init__(self, message: str, reasons: list[str] | None = None) -> None:
        self.reasons = reasons or []
        detail = "".join(f"\n  - {r}" for r in self.reasons)
        super().__init__(message + detail)


class ConversionError(EvolvableError):
    pass


class StoreError(EvolvableError):
    pass


class NotFound(StoreError):
    pass


class UnmigratedTables(StoreError):
    """Migrations are the only schema authority: a declared table no revision creates is never made directly."""

    def __init__(self, tables: list[str]) -> None:
        self.tables = tables
        super().__init__(
            f"no migration creates the table(s) {', '.join(tables)} that the code declares; "
            'add one (`evolvable db revision -m "..."`) and open the store again'
        )


class GovernanceError(EvolvableError):
    pass


class RedactionFailed(GovernanceError):
    pass


class UpstreamError(EvolvableError):
    def __init__(self, message: str, status_code: int = 502, error_type: str = "upstream_error") -> None:
        self.status_code = status_code
        self.error_type = error_type
        super().__init__(message)


class ControlError(EvolvableError):
    pass


class TrainingError(EvolvableError):
    pass


def default_error_type(status: int) -> str:
    """OpenAI's error `type` for a status, when the raiser names none."""
    if status == 401:
        return "authentication_error"
    if status == 403:
        return "permission_error"
    return "server_error" if status >= 500 else "invalid_request_error"


class HTTPError(EvolvableError):
    """A request refused or failed. The class carries the status, error type and code; an instance may
    override each (`HTTPError("...", status=429, code="rate_limited")`)."""

    status: int = 500
    error_type: str = ""
    """OpenAI's `type` (`invalid_request_error`, `permission_error`...); empty: derived from the status."""
    code: str | None = None
    """A machine-readable code (`invalid_api_key`); renderers fall back to the type."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        error_type: str | None = None,
        code: str | None = None,
        param: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status
        self.error_type = error_type or self.error_type or default_error_type(self.status)
        if code is not None:
            self.code = code
        self.param = param


class InvalidRequest(HTTPError):
    status = 400
    error_type = "invalid_request_error"


class Unauthenticated(HTTPError):
    status = 401
    error_type = "invalid_request_error"
    code = "invalid_api_key"


class Forbidden(HTTPError):
    status = 403
    error_type = "permission_error"


class ResourceNotFound(HTTPError):
    status = 404
    error_type = "invalid_request_error"
    code = "not_found"


class Conflict(HTTPError):
    status = 409
    error_type = "invalid_request_error"


class PayloadTooLarge(HTTPError):
    status = 413
    error_type = "invalid_request_error"
    code = "body_too_large"


class Unavailable(HTTPError):
    status = 503


Translation = Callable[[Exception], EvolvableError]


class map_exceptions:
    """Re-raise a third-party exception as ours: the first `mapping` key it is an instance of picks the
    translation (so list specific types before their bases). Ours and unmapped ones pass unchanged.
    A plain class, not a generator: entering and leaving it costs two method calls."""

    __slots__ = ("mapping",)

    def __init__(self, mapping: Mapping[type[Exception], Translation]) -> None:
        self.mapping = mapping

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, err: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if not isinstance(err, Exception) or isinstance(err, EvolvableError):
            return
        for mapped, translate in self.mapping.items():
            if isinstance(err, mapped):
                raise translate(err) from err
