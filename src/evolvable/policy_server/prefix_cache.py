"""Automatic prefix caching: reuse the KV states of a prompt's beginning that the engine computed before.

Agent traffic repeats itself: every request of an agent starts with the same system prompt and tool list,
and each turn of an episode starts with the whole previous turn. vLLM skips that work with automatic prefix
caching over paged blocks; this engine has no paged memory, so it keeps whole sequences instead: the KV
states of recent prompts and of finished sequences (prompt plus generated tokens), evicted least recently
used under a byte budget. A new prompt is prefilled only from the end of its longest cached prefix.

Entries are scoped by adapter: the same tokens under another LoRA adapter have other states, and an
adapter that is unloaded or replaced drops its entries. A cached prefix is numerically what a full prefill
computes, up to float rounding of the differently shaped matmuls.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import torch

__all__ = ["CachedPrefix", "PrefixCache"]

LayerStates = list[tuple[torch.Tensor, torch.Tensor]]
"""Per decoder layer, (keys, values) shaped [1, kv_heads, tokens, head_dim]."""


@dataclass(frozen=True, slots=True)
class CachedPrefix:
    length: int
    """Leading prompt tokens whose states are cached (always fewer than the prompt: one is left to prefill)."""
    layers: LayerStates
    """States for exactly those tokens."""


@dataclass(slots=True)
class _Entry:
    scope: Hashable
    ids: torch.Tensor
    layers: LayerStates
    nbytes: int


class PrefixCache:
    """LRU store of KV states keyed by token sequence, bounded in bytes; `min_tokens` ignores short matches
    (their prefill is cheaper than the bookkeeping)."""

    def __init__(self, max_bytes: int, *, min_tokens: int = 16) -> None:
        if max_bytes <= 0:
            raise ValueError("max_bytes must be positive")
        self.max_bytes = max_bytes
        self.min_tokens = min_tokens
        self.bytes = 0
        self._entries: OrderedDict[int, _Entry] = OrderedDict()
        self._next_key = 0

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, ids: Sequence[int], scope: Hashable) -> CachedPrefix | None:
        """The longest cached prefix of `ids` (leaving at least the last token to prefill), or None."""
        if len(ids) <= self.min_tokens:
            return None
        query = torch.tensor(ids, dtype=torch.long)
        best_key, best_length = None, 0
        for key, entry in self._entries.items():
            if entry.scope != scope:
                continue
            length = _common_prefix(query, entry.ids)
            if length > best_length:
                best_key, best_length = key, length
        best_length = min(best_length, len(ids) - 1)
        if best_key is None or best_length < self.min_tokens:
            return None
        self._entries.move_to_end(best_key)
        layers = self._entries[best_key].layers
        return CachedPrefix(best_length, [(k[:, :, :best_length], v[:, :, :best_length]) for k, v in layers])

    def insert(self, ids: Sequence[int], scope: Hashable, layers: LayerStates) -> None:
        """Keep the states of `ids` (tensors are kept as given: pass copies of anything that will change).

        An entry whose tokens begin another entry's tokens is redundant (the longer one answers every
        lookup the shorter would), so only the longer of the two is kept.
        """
        if len(ids) <= self.min_tokens or any(k.shape[2] != len(ids) for k, _ in layers):
            return
        new_ids = torch.tensor(ids, dtype=torch.long)
        for key, entry in list(self._entries.items()):
            if entry.scope != scope:
                continue
            shorter = min(len(entry.ids), len(new_ids))
            if _common_prefix(new_ids, entry.ids) < shorter:
                continue
            if len(entry.ids) >= len(new_ids):  # already covered
                self._entries.move_to_end(key)
                return
            self._drop(key)
        nbytes = sum(k.element_size() * k.nelement() + v.element_size() * v.nelement() for k, v in layers)
        if nbytes > self.max_bytes:
            return
        while self.bytes + nbytes > self.max_bytes:
            self._drop(next(iter(self._entries)))
        self._entries[self._next_key] = _Entry(scope, new_ids, layers, nbytes)
        self._next_key += 1
        self.bytes += nbytes

    def drop_scope(self, scope: Hashable) -> None:
        """Forget every entry of one scope (an adapter unloaded or replaced)."""
        for key in [k for k, e in self._entries.items() if e.scope == scope]:
            self._drop(key)

    def clear(self) -> None:
        self._entries.clear()
        self.bytes = 0

    def _drop(self, key: int) -> None:
        self.bytes -= self._entries.pop(key).nbytes


def _common_prefix(a: torch.Tensor, b: torch.Tensor) -> int:
    n = min(len(a), len(b))
    if n == 0:
        return 0
    differs = torch.nonzero(a[:n] != b[:n])
    return int(differs[0, 0]) if differs.numel() else n
