"""Agent wire protocols at the proxy's edge: the OpenAI Responses API and the Anthropic Messages API.

Each protocol is an adapter that turns its request into a chat-completions body and the chat answer back
into its own shape (streams included), so the hot path, the capture record and the ATDP are those of a
chat completion. When the upstream speaks the protocol natively (`protocols:` in the proxy config), the
request passes through unchanged and only the recording is normalised to chat form.
"""

from __future__ import annotations

WIRE_PATHS = {
    "/v1/responses": "responses",
    "/responses": "responses",
    "/v1/messages": "messages",
    "/messages": "messages",
    "/v1/messages/count_tokens": "count_tokens",
    "/messages/count_tokens": "count_tokens",
}
"""Paths the proxy serves through a wire adapter (`ProxyApp` dispatches them before FastAPI)."""
