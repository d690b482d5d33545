"""The Governor: what every captured event passes through between the proxy's spool and the store.

Stages, per trajectory: capture policy (full | metadata | off, per tenant and agent), then
redaction of what is kept. The policy goes by the run's agent and the capture it asked for, which
the caller hands over with the events (`runs`; the proxy's capture records name their run) or a start
event carries; the governor never reads a header back from the store. A run it cannot tell (a record
spooled before records named their run, and no start event seen) gets the strictest of its tenant's
modes. Fail closed: if a stage raises, every piece of text in that trajectory's
events is replaced by `<REDACTION_FAILED>` (token ids dropped too) and a `redaction_failed` audit
entry is written; content is never stored in the clear because a stage broke.

Token ids spell out the text they were produced from, so when redaction changes an llm_call's text
its engine token ids must change too: with a tokenizer for the call's model (`tokenizers`) the built-in
redactor rewrites them to decode to the redacted text (replaced completion tokens are marked, never trained
on); otherwise they and the logprobs are dropped (the step says so in `metadata.token_ids_dropped`). A
custom redactor that does not say it handles token ids gets the drop rule applied after it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, defaultdict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from evolvable.governance.audit import AuditAction, AuditLog
from evolvable.governance.capture import drop_token_ids, mark_redaction_failed, strictest, strip_content
from evolvable.governance.tenants import TenantDirectory
from evolvable.protocol.models import CaptureMode, Event, LLMCallStep, RunCapture, StepAppended, TrajectoryStarted
from evolvable.store import RunDocuments, Store
from evolvable.telemetry import metrics

if TYPE_CHECKING:
    from evolvable.governance.redaction.tokenizer_registry import TokenizerRegistry


_GOVERNED_EVENTS: dict[CaptureMode, Any] = {}


def _governed_events(mode: CaptureMode) -> Any:
    """The counter child of one capture mode, looked up once (`labels()` per trajectory was ~5% of the
    forked writer's CPU in a py-spy profile at c=16)."""
    child = _GOVERNED_EVENTS.get(mode)
    if child is None:
        child = _GOVERNED_EVENTS[mode] = metrics.GOVERNED_EVENTS.labels(mode.value)
    return child


class EventRedactorLike(Protocol):
    def redact_events(self, events: list[Event]) -> list[Event]: ...


def _default_redactor_type() -> type[Any]:
    from evolvable.governance.redaction import EventRedactor

    return EventRedactor


def _flush_redaction_counts() -> None:
    from evolvable.governance.redaction.engine import redaction_counts

    redaction_counts.flush()


def _llm_text(event: Any) -> bytes | None:
    if not (isinstance(event, StepAppended) and isinstance(event.step, LLMCallStep)):
        return None
    step = event.step
    return orjson.dumps(
        [
            [m.model_dump(mode="json") for m in step.request_messages],
            step.prompt,
            [(c.message.model_dump(mode="json") if c.message else None, c.text) for c in step.choices],
        ]
    )


class Governor:
    """Implements the proxy's Governor seam: `govern(events, runs) -> events`, fail closed."""

    def __init__(
        self,
        store: Store,
        *,
        directory: TenantDirectory | None = None,
        redactor: EventRedactorLike | None = None,
        audit: AuditLog | None = None,
        redact: bool = True,
        person_names: bool = False,
        recognizers: Sequence[Any] | None = None,
        agent_cache_size: int = 50_000,
        tokenizers: TokenizerRegistry | None = None,
    ) -> None:
        """`redactor` replaces the default engine; `recognizers` replace the default engine's recognizers;
        `tokenizers` (model -> tokenizer) let the default redactor keep redacted token ids."""
        self.store = store
        self.tokenizers = tokenizers
        self.audit = audit or AuditLog(store.engine)
        self.directory = directory or TenantDirectory(store.engine, audit=self.audit)
        self._redactor = redactor
        self._redact = redact
        self._person_names = person_names
        self._recognizers = recognizers
        self._local = threading.local()
        self._runs: OrderedDict[str, RunCapture] = OrderedDict()
        self._agent_cache_size = agent_cache_size
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ the seam

    def govern(self, events: list[Event], runs: Mapping[str, RunCapture] | None = None) -> list[Event]:
        """`runs`: each trajectory's agent and asked-for capture as the caller knows them (see the module)."""
        groups: dict[str, list[int]] = defaultdict(list)
        for index, event in enumerate(events):
            groups[event.trajectory_id].append(index)
        known = self._runs_for(events, runs or {}, list(groups))
        out: list[Any] = [None] * len(events)
        governed_by_mode: dict[CaptureMode, int] = {}
        for trajectory_id, indexes in groups.items():
            batch = [events[i] for i in indexes]
            tenant_id = batch[0].tenant_id
            policy = self.directory.policy_for(tenant_id)
            run = known.get(trajectory_id)
            # A run may ask for less capture than its tenant's policy (consent per session), never for more.
            mode = strictest([policy.capture_for(run.agent), run.capture]) if run else policy.capture_for(None)
            for i, governed in zip(indexes, self._govern_one(trajectory_id, tenant_id, mode, batch), strict=True):
                out[i] = governed
            governed_by_mode[mode] = governed_by_mode.get(mode, 0) + len(batch)
        for mode, count in governed_by_mode.items():  # once per batch and mode, not per trajectory
            _governed_events(mode).inc(count)
        metrics.export_writer_snapshot()
        return [e for e in out if e is not None]

    def warm_up(self) -> None:
        """Build the redaction engine now (its name lists take ~1 s, more on a loaded machine), so neither the first
        session created through the proxy nor the first writer batch waits for it."""
        if self._redact:
            self.redactor.redact_events([])

    def redact_identifiers(self, trajectory_id: str, identifiers: dict[str, str | None]) -> dict[str, str | None]:
        """The proxy's session row (agent, task id) redacted as the trajectory header's same fields are. A custom
        redactor without `redact_identifiers` keeps only identifiers that cannot hold a recognized value."""
        if not self._redact:
            return identifiers
        redact = getattr(self.redactor, "redact_identifiers", None)
        if redact is not None:
            return dict(redact(trajectory_id, identifiers))
        from evolvable.governance.redaction.engine import FAILED_MARKER
        from evolvable.governance.redaction.validators import plainly_safe_identifier

        return {k: v if v is None or plainly_safe_identifier(v) else FAILED_MARKER for k, v in identifiers.items()}

    def _on_stage_failure(self, kind: str, error: BaseException) -> None:
        """The redaction engine's failure hook: it failed closed on one text; remember the stage for the audit."""
        stages = getattr(self._local, "failed_stages", None)
        if stages is not None:
            stages.append(f"{kind}:{type(error).__name__}")

    # ------------------------------------------------------------------ stages

    def _govern_one(self, trajectory_id: str, tenant_id: str, mode: CaptureMode, batch: list[Any]) -> list[Any]:
        """Same length as `batch`; None where an event is dropped."""
        if mode == CaptureMode.off:
            return [None] * len(batch)
        try:
            kept = [strip_content(e) for e in batch] if mode == CaptureMode.metadata else list(batch)
            if not self._redact:
                return kept
            self._local.failed_stages = []
            redacted = list(self.redactor.redact_events(kept))
            if len(redacted) != len(kept):
                raise RuntimeError(f"redactor returned {len(redacted)} events for {len(kept)}")
            trusted = getattr(self.redactor, "rewrites_token_ids", False) is True
            governed = [
                drop_token_ids(after) if not trusted and _llm_text(before) != _llm_text(after) else after
                for before, after in zip(kept, redacted, strict=True)
            ]
            self._audit_failed_stages(trajectory_id, tenant_id, len(batch))
            return governed
        except Exception as err:  # fail closed on anything a stage raises
            metrics.GOVERNANCE_FAILURES.labels("governor").inc()
            self.audit.record(
                AuditAction.redaction_failed,
                actor="system",
                tenant_id=tenant_id,
                target=f"trajectory:{trajectory_id}",
                details={"error": type(err).__name__, "events": len(batch), "capture": mode.value},
            )
            return [drop_token_ids(mark_redaction_failed(e)) for e in batch]
        finally:
            self._local.failed_stages = None

    def _audit_failed_stages(self, trajectory_id: str, tenant_id: str, events: int) -> None:
        """The engine already replaced the texts a stage failed on by markers; the log says where and why."""
        if not self._local.failed_stages:
            return
        for stage in sorted(set(self._local.failed_stages)):
            metrics.GOVERNANCE_FAILURES.labels(stage.split(":")[0]).inc()
        self.audit.record(
            AuditAction.redaction_failed,
            actor="system",
            tenant_id=tenant_id,
            target=f"trajectory:{trajectory_id}",
            details={"stages": sorted(set(self._local.failed_stages)), "events": events},
        )

    # ------------------------------------------------------------------ finished runs as documents

    def govern_documents(self, runs: Sequence[RunDocuments]) -> list[RunDocuments | None]:
        """The runs to store, governed in place as `govern` governs their events; None for each run this cannot
        take, which the caller then governs as events: a capture other than `full` (content stripped or dropped),
        a custom redactor (it is given events), or a run whose redaction raised (the events' path fails closed)."""
        redactor = self.redactor if self._redact else None
        if redactor is not None and type(redactor) is not _default_redactor_type():
            return [None] * len(runs)
        out: list[RunDocuments | None] = []
        governed = 0
        try:
            for run in runs:
                policy = self.directory.policy_for(run.tenant_id)
                if strictest([policy.capture_for(run.run.agent), run.run.capture]) != CaptureMode.full:
                    out.append(None)
                    continue
                if redactor is not None and not self._redacted_run(redactor, run):
                    out.append(None)
                    continue
                out.append(run)
                governed += 1 + len(run.steps)
        finally:
            if redactor is not None:
                _flush_redaction_counts()
        if governed:
            _governed_events(CaptureMode.full).inc(governed)
        metrics.export_writer_snapshot()
        return out

    def _redacted_run(self, redactor: Any, run: RunDocuments) -> bool:
        self._local.failed_stages = []
        try:
            redactor.redact_run(run)
            self._audit_failed_stages(run.trajectory_id, run.tenant_id, 1 + len(run.steps))
            return True
        except Exception:  # the events' path redacts it again and fails closed, audited
            return False
        finally:
            self._local.failed_stages = None

    @property
    def redactor(self) -> EventRedactorLike:
        if self._redactor is None:
            with self._lock:
                if self._redactor is None:
                    from evolvable.governance.redaction import EventRedactor, RedactionEngine

                    engine = RedactionEngine(
                        self._recognizers, on_failure=self._on_stage_failure, person_names=self._person_names
                    )
                    self._redactor = EventRedactor(engine, tokenizers=self.tokenizers)
        return self._redactor

    # ------------------------------------------------------------------ which agent ran a trajectory

    def _runs_for(
        self, events: list[Event], carried: Mapping[str, RunCapture], trajectory_ids: list[str]
    ) -> dict[str, RunCapture]:
        """The run of each trajectory that can be told without the store: carried by the caller, else from a
        start event in this batch or an earlier one (a bounded LRU, for events whose caller names no run)."""
        for event in events:
            if isinstance(event, TrajectoryStarted):
                self._remember(event.trajectory_id, event.header.run_capture())
        with self._lock:
            return {tid: run for tid in trajectory_ids if (run := carried.get(tid) or self._runs.get(tid)) is not None}

    def _remember(self, trajectory_id: str, run: RunCapture) -> None:
        with self._lock:
            self._runs[trajectory_id] = run
            self._runs.move_to_end(trajectory_id)
            while len(self._runs) > self._agent_cache_size:
                self._runs.popitem(last=False)
