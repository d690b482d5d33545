"""Redaction of PII and secrets before anything is persisted (and, optionally, before the upstream sees it).

engine = RedactionEngine(on_failure=audit_hook)
engine.redact_text("mail bob@example.com")                 # 'mail <EMAIL_1>'
EventRedactor(engine).redact_events(events)                # per-trajectory consistent placeholders
StreamRedactor(engine).feed(chunk) / .flush()              # bounded look-behind for streamed text
EventRedactor(engine, tokenizers=TokenizerRegistry({"m": dir}))  # redacts llm_call token ids too

The hot modules run compiled when `scripts/setup.sh` built them (see `native`): activated before they are imported.
"""

from evolvable.governance.redaction import native

native.activate(__name__)

from evolvable.governance.redaction.engine import (
    FAILED_MARKER,
    FailureHook,
    PlaceholderMap,
    Redaction,
    RedactionEngine,
    default_engine,
    redact_text,
)
from evolvable.governance.redaction.events import EventRedactor
from evolvable.governance.redaction.findings import Finding
from evolvable.governance.redaction.live_values import live_values, live_values_function, placeholder_values
from evolvable.governance.redaction.recognizers import Recognizer, RegexRecognizer, default_recognizers
from evolvable.governance.redaction.stream import StreamRedactor
from evolvable.governance.redaction.token_ids import TokenCodec, TokenIdsMismatch
from evolvable.governance.redaction.tokenizer_registry import TokenizerRegistry

__all__ = [
    "FAILED_MARKER",
    "EventRedactor",
    "FailureHook",
    "Finding",
    "PlaceholderMap",
    "Recognizer",
    "Redaction",
    "RedactionEngine",
    "RegexRecognizer",
    "StreamRedactor",
    "TokenCodec",
    "TokenIdsMismatch",
    "TokenizerRegistry",
    "default_engine",
    "default_recognizers",
    "live_values",
    "live_values_function",
    "placeholder_values",
    "redact_text",
]
