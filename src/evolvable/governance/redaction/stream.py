"""Streaming-safe masking: redact text that arrives in chunks without buffering the whole answer.

A value split across chunks (`sk-pro` + `j-abc...`) must still be caught, so the redactor keeps a small
look-behind: the last `holdback` characters, plus the trailing unbroken run of non-space characters (a token
still being written; at most `max_token` characters), plus any finding that touches that tail (it may still
grow). Everything before is final and is emitted at once. A PEM private key is the one value longer than any
sensible buffer: once its BEGIN line is seen the placeholder is emitted and the body is swallowed until the
END line, in constant memory.
"""

from __future__ import annotations

import re

from evolvable.errors import RedactionFailed
from evolvable.governance.redaction.engine import (
    FAILED_MARKER,
    PlaceholderMap,
    RedactionEngine,
    apply_findings,
    default_engine,
)
from evolvable.governance.redaction.findings import Finding

_PEM_BODY = re.compile(r"(?:[A-Za-z0-9+/=\s:,]|\\[nr]|Proc-Type|DEK-Info)*")
_PEM_END = re.compile(r"-----END[ A-Z0-9]{0,20}PRIVATE KEY(?: BLOCK)?-----")
_PEM_END_MAX = 48
_SPACE = re.compile(r"\s")


class StreamRedactor:
    """`feed(chunk) -> str` returns what is safe to emit now; `flush() -> str` returns the rest at the end."""

    def __init__(
        self,
        engine: RedactionEngine | None = None,
        placeholders: PlaceholderMap | None = None,
        *,
        holdback: int = 128,
        max_token: int = 4096,
        context: int = 64,
    ) -> None:
        self.engine = engine or default_engine()
        self.placeholders = placeholders if placeholders is not None else PlaceholderMap()
        self.holdback, self.max_token, self.context_size = holdback, max_token, context
        self._context = ""  # already emitted original text: left context for `password=` + value
        self._pending = ""
        self._in_pem = False
        self._failed = False

    @property
    def buffered(self) -> int:
        """Characters held back right now (bounded by holdback + max_token, plus one finding)."""
        return len(self._pending)

    def feed(self, chunk: str) -> str:
        if self._failed:
            return ""
        self._pending += chunk
        return self._drain(final=False)

    def flush(self) -> str:
        if self._failed:
            return ""
        out = self._drain(final=True)
        self._pending, self._context, self._in_pem = "", "", False
        return out

    # -----------------------------------------------------------------

    def _drain(self, final: bool) -> str:
        out: list[str] = []
        while True:
            if self._in_pem and not self._swallow_pem(final):
                break
            emitted, entered_pem = self._emit(final)
            out.append(emitted)
            if not entered_pem:
                break
        return "".join(out)

    def _swallow_pem(self, final: bool) -> bool:
        """Drops key body; returns True once the key has ended (normal scanning resumes)."""
        body_end = _PEM_BODY.match(self._pending).end()  # type: ignore[union-attr]
        rest = self._pending[body_end:]
        end = _PEM_END.match(rest)
        if end is not None:
            self._pending, self._in_pem = rest[end.end() :], False
            return True
        if not final and rest.startswith("-") and len(rest) < _PEM_END_MAX:
            self._pending = rest  # maybe the END line, still arriving
            return False
        if not final and not rest:
            self._pending = ""
            return False
        self._pending, self._in_pem = rest, False  # an unterminated key followed by other text
        return True

    def _emit(self, final: bool) -> tuple[str, bool]:
        ctx = self._context
        text = ctx + self._pending
        try:
            findings = self.engine.find(text)
        except RedactionFailed:
            self._failed = True
            self._pending = ""
            return FAILED_MARKER, False
        base = len(ctx)
        findings = [_clip(f, base) for f in findings if f.end > base]
        limit = len(text) if final else self._limit(text, base)
        pem_at: Finding | None = None
        for f in findings:
            if f.kind == "PRIVATE_KEY" and not _PEM_END.search(text, f.start, f.end) and f.start >= base:
                pem_at = f  # an unterminated key: emit its placeholder now, swallow the body as it arrives
                limit = min(limit, f.start)
                break
            if not final and f.end > limit:
                limit = min(limit, f.start)
        limit = max(limit, base)
        done = [f for f in findings if f.end <= limit]
        emitted = apply_findings(text[base:limit], [_shift(f, base) for f in done], self.placeholders)
        if pem_at is not None and pem_at.start == limit:
            emitted += self.placeholders.placeholder("PRIVATE_KEY", text[pem_at.start : pem_at.end])
            self._in_pem = True
            self._pending = text[pem_at.end :]
            self._context = ""
            return emitted, True
        self._context = text[max(0, limit - self.context_size) : limit]
        self._pending = text[limit:]
        return emitted, False

    def _limit(self, text: str, base: int) -> int:
        limit = len(text) - self.holdback
        tail_start = len(text)
        while tail_start > base and not text[tail_start - 1].isspace() and len(text) - tail_start < self.max_token:
            tail_start -= 1
        if len(text) - tail_start < self.max_token:
            limit = min(limit, tail_start)
        return max(limit, base)


def _clip(f: Finding, base: int) -> Finding:
    return f if f.start >= base else Finding(base, f.end, f.kind, f.priority)


def _shift(f: Finding, base: int) -> Finding:
    return Finding(f.start - base, f.end - base, f.kind, f.priority)


__all__ = ["StreamRedactor"]
