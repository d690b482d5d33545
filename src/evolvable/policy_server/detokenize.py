"""Turning generated token ids into text: stop strings, streaming deltas, and per-token bytes."""

from __future__ import annotations

from typing import cast

from transformers import PreTrainedTokenizerBase

from evolvable.protocol.byte_bpe import unicode_to_byte


class TokenText:
    """Text views of single tokens for logprobs entries: the token's exact bytes and a display string."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase) -> None:
        self._tokenizer = tokenizer
        self._special = set(tokenizer.all_special_ids)
        self._cache: dict[int, tuple[str, list[int]]] = {}

    def __call__(self, token_id: int) -> tuple[str, list[int]]:
        cached = self._cache.get(token_id)
        if cached is not None:
            return cached
        piece = self._tokenizer.convert_ids_to_tokens(token_id)
        mapping = unicode_to_byte()
        if token_id in self._special or not all(ch in mapping for ch in piece):
            # (one sequence's ids decode to one string; the stubs also allow a batch's list)
            raw = cast(str, self._tokenizer.decode([token_id])).encode("utf-8")
        else:
            raw = bytes(mapping[ch] for ch in piece)
        result = (raw.decode("utf-8", errors="replace"), list(raw))
        self._cache[token_id] = result
        return result


def find_stop(text: str, stops: list[str], search_from: int) -> tuple[int, str] | None:
    """The earliest stop string occurring in text at or after `search_from` (minus overlap), if any."""
    best: tuple[int, str] | None = None
    for stop in stops:
        index = text.find(stop, max(0, search_from - len(stop) + 1))
        if index != -1 and (best is None or index < best[0]):
            best = (index, stop)
    return best


def safe_text_end(text: str, stops: list[str]) -> int:
    """How much of text can be streamed now: hold back an incomplete UTF-8 character and any
    suffix that could still grow into a stop string."""
    end = len(text)
    while end > 0 and text[end - 1] == "\ufffd":
        end -= 1
    limit = end
    for stop in stops:
        for length in range(min(len(stop) - 1, end), 0, -1):
            if text.endswith(stop[:length], 0, end):
                limit = min(limit, end - length)
                break
    return limit
