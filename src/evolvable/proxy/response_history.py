"""Conversations behind Responses ids, so `previous_response_id` works when the upstream speaks chat.

Recent answers are kept in memory exactly as the client saw them (bounded LRU, raw content, never for
`store: false`). An id not in memory (a restart, another replica) is read back from the store: the
`llm_call` step whose id the response id names, in the caller's tenant and session. The store holds the
governed copy, so redacted spans come back as their placeholders.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from evolvable.errors import NotFound
from evolvable.protocol.models import LLMCallStep
from evolvable.proxy.capture import llm_step_id
from evolvable.proxy.wire.responses import ID_PREFIX, PROTOCOL

if TYPE_CHECKING:
    from evolvable.proxy.runtime import ProxyRuntime

Owner = tuple[str, str | None]
"""(tenant id, session id or None): only the same owner may continue a response."""


class ResponseHistory:
    def __init__(self, max_entries: int = 4096) -> None:
        self.max_entries = max_entries
        self._recent: OrderedDict[str, tuple[Owner, list[dict[str, Any]]]] = OrderedDict()

    def remember(self, response_id: str, owner: Owner, messages: list[dict[str, Any]]) -> None:
        self._recent[response_id] = (owner, messages)
        while len(self._recent) > self.max_entries:
            self._recent.popitem(last=False)

    async def recall(self, rt: ProxyRuntime, response_id: str, owner: Owner) -> list[dict[str, Any]] | None:
        """The conversation `response_id` continues, or None if this owner has no such stored response."""
        hit = self._recent.get(response_id)
        if hit is not None:
            return list(hit[1]) if hit[0] == owner else None
        if not response_id.startswith(ID_PREFIX) or len(response_id) <= len(ID_PREFIX):
            return None
        return await _from_store(rt, response_id, owner)


async def _from_store(rt: ProxyRuntime, response_id: str, owner: Owner) -> list[dict[str, Any]] | None:
    request_id = response_id[len(ID_PREFIX) :]
    tenant_id, session_id = owner
    trajectory_id = session_id or f"traj_{request_id}"
    await rt.flush()
    try:
        trajectory = await asyncio.to_thread(rt.store.get_trajectory, trajectory_id, tenant_id)
    except NotFound:
        return None
    wanted = llm_step_id(request_id)
    step = next((s for s in trajectory.steps if s.id == wanted), None)
    if not isinstance(step, LLMCallStep) or not step.choices or step.choices[0].message is None:
        return None
    wire = step.metadata.get("wire") if isinstance(step.metadata, dict) else None
    if not isinstance(wire, dict) or wire.get("protocol") != PROTOCOL or not wire.get("store", True):
        return None
    messages = [m.model_dump(mode="json", exclude_none=True) for m in step.request_messages]
    while messages and messages[0].get("role") == "system":  # instructions (and a harness prompt) do not carry over
        messages.pop(0)
    return [*messages, step.choices[0].message.model_dump(mode="json", exclude_none=True)]
