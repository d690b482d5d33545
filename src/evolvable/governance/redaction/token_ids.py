"""Redaction of engine token ids with the model's own tokenizer, so calls that carried PII stay usable for RL.

Token ids spell out the text they were produced from, so when redaction changes a call's text its ids must
change too. Byte-level BPE makes this exact: every token is a byte string (a multi-byte character may be
split between two tokens), so each token's byte span in the decoded text is known; bytes that are not valid
UTF-8 (a completion cut inside an emoji) decode to U+FFFD exactly as the tokenizer decodes them. The text is
redacted with the same engine and the trajectory's PlaceholderMap as the messages; each run of tokens that
overlaps a finding, widened to whole characters, is replaced by the tokenization of (its text before the
finding + placeholder + its text after it). The new ids decode to exactly the redacted text, which is checked
before anything is kept. Replaced completion tokens were never sampled by the policy: their positions are
recorded (`CompletionChoice.redacted_token_spans`, logprob 0.0) so RL gives them loss mask 0.

All or nothing per call: if any check fails (the tokens do not decode to the stored text, a value redaction
replaced is still readable in them, ...) `TokenIdsMismatch` is raised and the caller drops the ids.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

from evolvable.governance.redaction.engine import PlaceholderMap, RedactionEngine
from evolvable.governance.redaction.findings import Finding
from evolvable.protocol.byte_bpe import unicode_to_byte

_PROBE = "Mail bob.o'neil@example.com <re: façade> ñ 中文 😀\n\tx  = 42!"
"""Round-tripped when a tokenizer is wrapped: multi-byte characters, whitespace runs, punctuation."""


class TokenIdsMismatch(Exception):
    """The ids cannot be redacted consistently with the stored text; the caller drops them."""


class TokenCodec:
    """A byte-level BPE tokenizer seen as bytes: each id's exact bytes, which ids are special, and encoding.

    `tokenizer` is a `tokenizers.Tokenizer` or a Hugging Face fast tokenizer (its Rust backend is used).
    Raises ValueError for a tokenizer whose tokens are not byte strings (SentencePiece, byte fallback):
    offsets would not be exact, so such models keep today's behaviour (ids dropped)."""

    def __init__(self, tokenizer: Any) -> None:
        backend = getattr(tokenizer, "backend_tokenizer", tokenizer)
        if not hasattr(backend, "get_added_tokens_decoder"):
            raise ValueError(f"{type(tokenizer).__name__} is not a fast (Rust) tokenizer")
        self._tokenizer = backend
        added = {int(i): t for i, t in backend.get_added_tokens_decoder().items()}
        self.special_ids = frozenset(i for i, t in added.items() if t.special)
        mapping = unicode_to_byte()
        size = max([backend.get_vocab_size(with_added_tokens=True), *(i + 1 for i in added)])
        # Every id's bytes, once (~50 ms for a 49k vocabulary): decoding is then a list lookup per token.
        self._table: list[bytes | None] = []
        for token_id in range(size):
            if token_id in added:
                self._table.append(added[token_id].content.encode("utf-8"))
                continue
            piece = backend.id_to_token(token_id)
            if piece is None:
                self._table.append(None)
            elif all(c in mapping for c in piece):
                self._table.append(bytes(mapping[c] for c in piece))
            else:
                self._table.append(piece.encode("utf-8"))
        self._visible_table = [b"" if i in self.special_ids else b for i, b in enumerate(self._table)]
        probe = self.encode(_PROBE)
        if self.decode(probe, skip_special=False) != _PROBE or backend.decode(probe) != _PROBE:
            raise ValueError("not a byte-level BPE tokenizer: token bytes do not round-trip")

    def token_bytes(self, token_id: int) -> bytes:
        return self.pieces([token_id], skip_special=False)[0]

    def encode(self, text: str) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def pieces(self, ids: Sequence[int], *, skip_special: bool) -> list[bytes]:
        """Each token's bytes; b"" for special tokens when they are skipped (as `decode(skip_special_tokens)`)."""
        table = self._visible_table if skip_special else self._table
        try:
            found = [table[i] for i in ids]
            if ids and min(ids) < 0:
                raise IndexError
        except (IndexError, TypeError):
            found = [None]
        if None in found:
            known = range(len(table))
            unknown = next((i for i in ids if not isinstance(i, int) or i not in known or table[i] is None), "?")
            raise TokenIdsMismatch(f"token id {unknown!r} is not in the tokenizer's vocabulary")
        return found  # type: ignore[return-value]

    def decode(self, ids: Sequence[int], *, skip_special: bool) -> str:
        """As the tokenizer decodes: invalid UTF-8 becomes U+FFFD (one per maximal invalid run)."""
        return b"".join(self.pieces(ids, skip_special=skip_special)).decode("utf-8", errors="replace")


@dataclass(frozen=True, slots=True)
class TokenRedaction:
    ids: list[int]
    replaced: list[tuple[int, int]]
    """[start, end) ranges of `ids` that stand for redacted text: tokenized placeholders and their context."""
    text: str
    """What `ids` decode to: the redacted text."""
    logprobs: list[float] | None = None
    """The input logprobs realigned with `ids`: 0.0 on replaced tokens."""


def redact_token_ids(
    ids: Sequence[int],
    codec: TokenCodec,
    engine: RedactionEngine,
    placeholders: PlaceholderMap,
    *,
    skip_special: bool,
    logprobs: Sequence[float] | None = None,
) -> TokenRedaction:
    """Redacts what `ids` decode to and rewrites the ids to match; see the module docstring."""
    pieces = codec.pieces(ids, skip_special=skip_special)
    decoded = _DecodedText(b"".join(pieces))
    text = decoded.text
    result = engine.redact(text, placeholders)
    if result.failed:
        raise TokenIdsMismatch("redaction of the decoded tokens failed")
    if not result.findings:
        return TokenRedaction(list(ids), [], text, list(logprobs) if logprobs is not None else None)

    visible = [i for i, piece in enumerate(pieces) if piece]  # token index of each token that has bytes
    ends = list(accumulate(len(pieces[i]) for i in visible))
    starts = [0, *ends[:-1]]
    groups = _token_groups(result.findings, decoded, starts, ends)

    out_ids: list[int] = []
    out_logprobs: list[float] | None = [] if logprobs is not None else None
    replaced: list[tuple[int, int]] = []
    cursor = 0
    for first, last, findings in groups:
        start_char, end_char = decoded.char_at(starts[first]), decoded.char_at(ends[last])
        segment_ids = codec.encode(_segment(text, start_char, end_char, findings, placeholders))
        a, b = visible[first], visible[last] + 1
        out_ids += ids[cursor:a]
        replaced.append((len(out_ids), len(out_ids) + len(segment_ids)))
        out_ids += segment_ids
        if out_logprobs is not None and logprobs is not None:
            out_logprobs += [*logprobs[cursor:a], *([0.0] * len(segment_ids))]
        cursor = b
    out_ids += ids[cursor:]
    if out_logprobs is not None and logprobs is not None:
        out_logprobs += logprobs[cursor:]

    if codec.decode(out_ids, skip_special=skip_special) != result.text:
        raise TokenIdsMismatch("the re-tokenized placeholders do not decode to the redacted text")
    return TokenRedaction(out_ids, replaced, result.text, out_logprobs)


class _DecodedText:
    """Bytes decoded as the tokenizer does (invalid UTF-8 -> U+FFFD per maximal invalid run, like
    `bytes.decode(errors="replace")`), with exact character <-> byte offsets."""

    def __init__(self, blob: bytes) -> None:
        self.blob = blob
        self._starts: list[int] | None = None  # byte offset of each character (+ the end); only for invalid UTF-8
        try:
            self.text = blob.decode("utf-8")
        except UnicodeDecodeError:
            self.text, self._starts = self._lossy(blob)
            self._start_set = set(self._starts)

    @staticmethod
    def _lossy(blob: bytes) -> tuple[str, list[int]]:
        parts: list[str] = []
        starts: list[int] = []
        position = 0
        while position < len(blob):
            try:
                valid, good_end = blob[position:].decode("utf-8"), len(blob)
                bad_end = good_end
            except UnicodeDecodeError as err:
                good_end, bad_end = position + err.start, position + err.end
                valid = blob[position:good_end].decode("utf-8")
            starts += [i for i in range(position, good_end) if blob[i] & 0xC0 != 0x80]
            parts.append(valid)
            if bad_end > good_end:
                starts.append(good_end)
                parts.append("\ufffd")
            position = bad_end
        starts.append(len(blob))
        return "".join(parts), starts

    def byte_at(self, char: int) -> int:
        if self._starts is not None:
            return self._starts[char]
        return len(self.text[:char].encode("utf-8"))

    def char_at(self, offset: int) -> int:
        """The character starting at byte `offset` (a character boundary)."""
        if self._starts is not None:
            return bisect.bisect_left(self._starts, offset)
        return len(self.blob[:offset].decode("utf-8"))

    def is_boundary(self, offset: int) -> bool:
        if self._starts is not None:
            return offset in self._start_set
        return offset >= len(self.blob) or self.blob[offset] & 0xC0 != 0x80


def _token_groups(
    findings: Sequence[Finding], decoded: _DecodedText, starts: list[int], ends: list[int]
) -> list[tuple[int, int, list[Finding]]]:
    """Runs of visible tokens [first, last] to replace, widened to whole characters, with their findings."""
    groups: list[tuple[int, int, list[Finding]]] = []
    for f in findings:
        fb, fe = decoded.byte_at(f.start), decoded.byte_at(f.end)
        first = bisect.bisect_right(ends, fb)
        last = bisect.bisect_left(starts, fe) - 1
        if fe <= fb or last < first:
            raise TokenIdsMismatch("a finding covers no token")
        while first > 0 and not decoded.is_boundary(starts[first]):  # the token starts inside a character
            first -= 1
        while last + 1 < len(ends) and not decoded.is_boundary(ends[last]):  # it ends inside a character
            last += 1
        if groups and first <= groups[-1][1]:
            prev_first, prev_last, prev_findings = groups[-1]
            groups[-1] = (prev_first, max(prev_last, last), [*prev_findings, f])
        else:
            groups.append((first, last, [f]))
    return groups


def _segment(text: str, start: int, end: int, findings: list[Finding], placeholders: PlaceholderMap) -> str:
    """text[start:end] with its findings replaced by their placeholders (the map already holds them)."""
    parts: list[str] = []
    position = start
    for f in findings:
        parts += [text[position : f.start], placeholders.placeholder(f.kind, text[f.start : f.end])]
        position = f.end
    parts.append(text[position:end])
    return "".join(parts)


# ----------------------------------------------------------------------------- one llm_call step


def redact_step_token_ids(
    step: dict[str, Any],
    codec: TokenCodec,
    engine: RedactionEngine,
    placeholders: PlaceholderMap,
    secrets: Iterable[str],
) -> int:
    """Rewrites an llm_call step's (dumped) prompt and completion ids in place, all or nothing.

    The step's texts are already redacted with `placeholders`; `secrets` are the raw values that redaction
    replaced in them, none of which may remain readable in the new ids. Returns the number of token ranges
    replaced; raises TokenIdsMismatch (step untouched) when the ids cannot match the stored text."""
    decoded: list[str] = []
    replaced = 0
    prompt_ids = step.get("prompt_token_ids")
    new_prompt: list[int] | None = None
    if prompt_ids is not None:
        prompt = redact_token_ids(prompt_ids, codec, engine, placeholders, skip_special=False)
        _check_prompt(step, prompt.text)
        new_prompt, replaced = prompt.ids, len(prompt.replaced)
        decoded.append(prompt.text)
    new_choices: list[tuple[TokenRedaction, list[tuple[int, int]]] | None] = []
    for choice in step.get("choices") or []:
        ids = choice.get("completion_token_ids")
        if ids is None:
            if choice.get("logprobs") is not None:
                raise TokenIdsMismatch("logprobs without completion token ids")
            new_choices.append(None)
            continue
        completion = redact_token_ids(
            ids, codec, engine, placeholders, skip_special=True, logprobs=choice.get("logprobs")
        )
        if completion.text != _stored_completion_text(choice):
            raise TokenIdsMismatch("completion tokens decode to other text than the stored answer")
        new_choices.append((completion, _spans(choice.get("redacted_token_spans"), completion.replaced)))
        replaced += len(completion.replaced)
        decoded.append(completion.text)
    _check_no_secret(secrets, decoded)

    step["prompt_token_ids"] = new_prompt
    for choice, new in zip(step.get("choices") or [], new_choices, strict=True):
        if new is not None:
            choice["completion_token_ids"] = new[0].ids
            choice["logprobs"] = new[0].logprobs
            choice["redacted_token_spans"] = new[1] or None
    return replaced


def _spans(before: list[Any] | None, new: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The replaced ranges to record: this pass's, or an earlier pass's (re-redacting stored data) when this
    one changed nothing. Both at once would need shifting the old ranges; such ids are dropped instead."""
    if not before:
        return list(new)
    if not new:
        return [(int(a), int(b)) for a, b in before]
    raise TokenIdsMismatch("completion ids were already redacted once and changed again")


def _stored_completion_text(choice: dict[str, Any]) -> str | None:
    """The answer text the completion tokens must decode to: plain message content, or the completions text."""
    message = choice.get("message")
    if message is not None:
        content = message.get("content")
        if message.get("tool_calls") or not isinstance(content, str):
            return None  # tool calls were parsed out of the tokens: they cannot be checked against one text
        return content
    return choice.get("text")


def _check_prompt(step: dict[str, Any], prompt_text: str) -> None:
    """Every stored (redacted) request text must appear in what the prompt ids decode to: proves the tokenizer
    is the model's and the placeholders are the messages' own."""
    texts: list[str] = []
    if step.get("endpoint") == "completions":
        texts.append(step.get("prompt") or "")
    for message in step.get("request_messages") or []:
        content = message.get("content")
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            texts += [str(p["text"]) for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)]
    checked = [t.strip() for t in texts if t.strip()]
    if not checked:
        raise TokenIdsMismatch("no request text to check the prompt tokens against")
    if any(t not in prompt_text for t in checked):
        raise TokenIdsMismatch("the prompt tokens do not contain the stored request text")


def _check_no_secret(secrets: Iterable[str], decoded: list[str]) -> None:
    lowered = [d.lower() for d in decoded]
    for secret in secrets:
        value = secret.strip().lower()
        if value and any(value in d for d in lowered):
            raise TokenIdsMismatch("a redacted value is still readable in the token ids")


__all__ = ["TokenCodec", "TokenIdsMismatch", "TokenRedaction", "redact_step_token_ids", "redact_token_ids"]
