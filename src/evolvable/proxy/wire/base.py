"""What every wire adapter shares: its error, the request it produced, and the call it hands the hot path."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from evolvable.errors import HTTPError
from evolvable.proxy.config import UpstreamConfig


class WireError(HTTPError):
    """A request the protocol rejects, with the offending `param`; rendered in the protocol's own shape."""

    def __init__(
        self, status: int, message: str, code: str = "invalid_request_error", param: str | None = None
    ) -> None:
        super().__init__(message, status=status, code=code, param=param)


def require(condition: bool, message: str, param: str | None = None) -> None:
    if not condition:
        raise WireError(400, message, "invalid_request_error", param)


def require_list(value: Any, message: str, param: str | None = None) -> list[Any]:
    if not isinstance(value, list):
        raise WireError(400, message, "invalid_request_error", param)
    return value


def require_dict(value: Any, message: str, param: str | None = None) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise WireError(400, message, "invalid_request_error", param)
    return value


@dataclass
class WireRequest:
    """A client's request in its protocol, and the chat-completions body that means the same."""

    native: dict[str, Any]
    chat: dict[str, Any]
    stream: bool
    store: bool = True


class NativeCodec(Protocol):
    """Between a protocol's native form and chat form, for calls passed through to a native upstream."""

    def chat_reply(self, native_reply: dict[str, Any]) -> dict[str, Any]:
        """A native answer as the chat reply it amounts to (for the recording)."""
        ...

    def native_request(self, native: dict[str, Any], chat: dict[str, Any]) -> dict[str, Any]:
        """The client's native request with the conversation and tools of `chat` (a harness's rewrite)."""
        ...


def text_of(content: Any) -> str:
    """A chat message's content as text (a string, or the text of its parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


@dataclass
class WireCall:
    """Handed to the hot path in the ASGI scope (`evolvable.wire`): what it needs to pass a call through
    natively, and where it reports who called (for `previous_response_id`)."""

    protocol: str
    native_path: str
    request: WireRequest
    normaliser: NativeCodec
    extra_headers: dict[str, str] = field(default_factory=dict)
    passed_through: bool = False
    tenant_id: str | None = None
    session_id: str | None = None
    id_prefix: str = ""

    def native_for(self, upstream: UpstreamConfig, body: dict[str, Any]) -> bool:
        """Pass through when the upstream speaks the protocol, unless it also speaks chat and the harness
        changed the request (then the translated, rewritten request goes: token ids are captured on chat)."""
        if self.protocol not in upstream.protocols:
            return False
        return "chat" not in upstream.protocols or not self.rewritten(body)

    def rewritten(self, body: dict[str, Any]) -> bool:
        """Did the rewriter (the harness) change more than the model of the translated request?"""
        sent = self.request.chat
        return body is not sent and {k: v for k, v in body.items() if k != "model"} != {
            k: v for k, v in sent.items() if k != "model"
        }

    def native_body(self, model: Any, body: dict[str, Any]) -> dict[str, Any]:
        """What goes to a native upstream: the client's request, with the harness's rewrite if there was one."""
        native = (
            self.normaliser.native_request(self.request.native, body) if self.rewritten(body) else self.request.native
        )
        return {**native, "model": model}

    def record(self, request_id: str, native: bool) -> dict[str, Any]:
        """What the capture record (and the step's metadata) says about the wire."""
        return {
            "protocol": self.protocol,
            "id": f"{self.id_prefix}{request_id}",
            "native": native,
            "store": self.request.store,
        }
