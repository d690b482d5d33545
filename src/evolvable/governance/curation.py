"""Curation: which stored trajectories are fit to learn from, and which are (near) copies of others.

Quality filters drop unfinished or abandoned runs, runs with upstream errors, truncated answers
(finish_reason=length), runs without engine token ids when an RL view needs them, runs whose content
was not captured or failed redaction, and runs outside length bounds. Duplicates are found on the
normalized conversation: exact copies by content hash, near copies by MinHash LSH (datasketch) over
character shingles, so a changed order number or typo does not make a run "new".
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, Literal

import orjson
from datasketch import MinHash, MinHashLSH
from pydantic import BaseModel, ConfigDict, Field

from evolvable.errors import GovernanceError
from evolvable.governance.capture import REDACTION_FAILED
from evolvable.protocol.models import (
    CaptureMode,
    ChatMessage,
    LLMCallStep,
    MessageStep,
    StepStatus,
    ToolCallStep,
    Trajectory,
    TrajectoryStatus,
)

DedupMode = Literal["exact", "near", "none"]


class QualityConfig(BaseModel):
    """Which runs are fit for a dataset. Every field has a CLI spelling: `--quality key=value`."""

    model_config = ConfigDict(extra="forbid")

    statuses: list[TrajectoryStatus] = Field(
        default_factory=lambda: [TrajectoryStatus.completed, TrajectoryStatus.failed],
        description="Allowed statuses; running (incomplete) and abandoned runs are dropped by default.",
    )
    drop_upstream_errors: bool = True
    drop_truncated: bool = Field(
        True, description="Drop runs with an answer cut off at max_tokens (finish_reason=length)."
    )
    require_token_ids: bool = Field(False, description="Every llm_call has engine token ids (RL views).")
    require_content: bool = Field(True, description="Drop runs captured as metadata only or with failed redaction.")
    min_steps: int = Field(1, ge=0)
    max_steps: int | None = Field(None, ge=1)
    min_chars: int = Field(0, ge=0, description="Bounds on the normalized conversation's length.")
    max_chars: int | None = Field(None, ge=1)

    @classmethod
    def off(cls) -> QualityConfig:
        return cls(
            statuses=list(TrajectoryStatus),
            drop_upstream_errors=False,
            drop_truncated=False,
            require_content=False,
            min_steps=0,
        )

    @classmethod
    def parse(cls, specs: list[str]) -> QualityConfig:
        """`["none"]`, `["rl"]` (token ids required), or `key=value` overrides of the defaults."""
        base: dict[str, Any] = {}
        config = cls()
        for spec in specs:
            if spec in {"none", "off"}:
                config = cls.off()
                continue
            if spec == "default":
                continue
            if spec == "rl":
                base["require_token_ids"] = True
                continue
            key, sep, value = spec.partition("=")
            if not sep or key not in cls.model_fields:
                keys = ", ".join(sorted(cls.model_fields))
                raise GovernanceError(f"bad quality spec {spec!r}: use none, default, rl, or key=value ({keys})")
            base[key] = value.split(",") if key == "statuses" else (None if value.lower() == "none" else value)
        try:
            return cls.model_validate({**config.model_dump(), **base})
        except ValueError as err:
            raise GovernanceError(f"bad quality spec: {err}") from None


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


def _message_text(message: ChatMessage) -> str:
    calls = " ".join(f"{c.function.name}({c.function.arguments})" for c in message.tool_calls or [])
    return f"{message.role}: {message.text()} {calls}".strip()


def conversation_text(trajectory: Trajectory) -> str:
    """The run as one normalized text: task input, new messages of each call, answers, tool calls.

    Later calls resend the history; only messages that were not already said are added again."""
    parts: list[str] = [_text(trajectory.task_input)]
    previous: list[str] = []
    for step in trajectory.steps:
        if isinstance(step, LLMCallStep):
            sent = [_message_text(m) for m in step.request_messages]
            if step.prompt:
                sent.append(step.prompt)
            shared = 0
            while shared < min(len(sent), len(previous)) and sent[shared] == previous[shared]:
                shared += 1
            parts.extend(sent[shared:])
            answers = [_message_text(c.message) if c.message else (c.text or "") for c in step.choices[:1]]
            parts.extend(answers)
            previous = sent + answers
        elif isinstance(step, ToolCallStep):
            parts.append(f"tool {step.tool_name}: {_text(step.arguments)} -> {_text(step.result)}")
        elif isinstance(step, MessageStep):
            parts.append(f"{step.role}: {_text(step.content)}")
    return normalize(" \n".join(p for p in parts if p))


_SPACE = re.compile(r"\s+")


def normalize(text: str) -> str:
    return _SPACE.sub(" ", text.lower()).strip()


def quality_issues(trajectory: Trajectory, config: QualityConfig, text: str | None = None) -> list[str]:
    """Reasons this run should not be learned from; empty when it passes."""
    issues: list[str] = []
    if trajectory.status not in config.statuses:
        issues.append(f"status_{trajectory.status.value}")
    calls = trajectory.llm_calls()
    if config.drop_upstream_errors and any(c.status == StepStatus.error or c.error is not None for c in calls):
        issues.append("upstream_error")
    if config.drop_truncated and any(ch.finish_reason == "length" for c in calls for ch in c.choices):
        issues.append("truncated")
    if config.require_token_ids and (not calls or not all(c.has_token_ids for c in calls)):
        issues.append("missing_token_ids")
    text = conversation_text(trajectory) if text is None else text
    if config.require_content and (trajectory.capture != CaptureMode.full or REDACTION_FAILED.lower() in text):
        issues.append("no_content")
    if len(trajectory.steps) < config.min_steps:
        issues.append("too_few_steps")
    if config.max_steps is not None and len(trajectory.steps) > config.max_steps:
        issues.append("too_many_steps")
    if len(text) < config.min_chars:
        issues.append("too_short")
    if config.max_chars is not None and len(text) > config.max_chars:
        issues.append("too_long")
    return issues


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def shingles(text: str, size: int = 5) -> list[bytes]:
    if len(text) <= size:
        return [text.encode()]
    return list({text[i : i + size].encode() for i in range(len(text) - size + 1)})


class Deduplicator:
    """Streaming duplicate detection across trajectories; the first run seen is kept."""

    def __init__(self, mode: DedupMode = "near", *, threshold: float = 0.8, num_perm: int = 128) -> None:
        if mode not in ("exact", "near", "none"):
            raise GovernanceError(f"unknown dedup mode {mode!r}: use exact, near or none")
        self.mode = mode
        self.num_perm = num_perm
        self._hashes: set[str] = set()
        self._lsh = MinHashLSH(threshold=threshold, num_perm=num_perm) if mode == "near" else None
        self._count = 0

    def check(self, text: str) -> Literal["duplicate_exact", "duplicate_near"] | None:
        """Classify `text` against everything seen so far, then remember it if it is new."""
        if self.mode == "none":
            return None
        digest = content_hash(text)
        if digest in self._hashes:
            return "duplicate_exact"
        if self._lsh is not None:
            signature = MinHash(num_perm=self.num_perm)
            signature.update_batch(shingles(text))
            if self._lsh.query(signature):
                return "duplicate_near"
            self._lsh.insert(str(self._count), signature)
        self._hashes.add(digest)
        self._count += 1
        return None
