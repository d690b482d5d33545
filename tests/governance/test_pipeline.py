"""The Governor: capture policy per tenant and agent, redaction, fail-closed markers, token-id hygiene."""

from __future__ import annotations

from typing import Any

from tests.support.no_read_store import engine_only
from tests.support.numbers import names_number

from evolvable.governance.audit import AuditAction, AuditLog
from evolvable.governance.capture import REDACTION_FAILED
from evolvable.governance.pipeline import Governor
from evolvable.governance.tenants import TenantDirectory
from evolvable.protocol.models import CaptureMode, Event, StepAppended, events_for
from evolvable.proxy.hooks import Governor as GovernorSeam
from evolvable.store import Store

from .builders import make_trajectory

SECRET = "sk-proj-THISISASECRETKEY0123456789"


class ReplacingRedactor:
    """Stands in for the regex engine: replaces one known secret, so the stages around it are tested alone."""

    def redact_events(self, events: list[Event]) -> list[Event]:
        out = []
        for e in events:
            raw = e.model_dump_json().replace(SECRET, "<SECRET_1>")
            out.append(type(e).model_validate_json(raw))
        return out


class ExplodingRedactor:
    def redact_events(self, events: list[Event]) -> list[Event]:
        raise RuntimeError(f"recognizer crashed on {SECRET}")


def _governor(store: Store, redactor: Any, **tenants: dict[str, Any]) -> Governor:
    directory = TenantDirectory(store.engine, cache_ttl_s=0)
    for tenant_id, policy in tenants.items():
        directory.create_tenant(tenant_id, **policy)
    return Governor(store, directory=directory, redactor=redactor)


def test_full_capture_redacts_and_drops_token_ids_of_changed_calls(store: Store) -> None:
    governor = _governor(store, ReplacingRedactor(), acme={})
    assert isinstance(governor, GovernorSeam)
    t = make_trajectory(question=f"my key is {SECRET}")
    store.apply_events(governor.govern(events_for(t)))
    stored = store.get_trajectory(t.id)
    assert SECRET not in stored.model_dump_json()
    assert stored.capture == CaptureMode.full
    first, _tool, second = stored.steps
    assert "<SECRET_1>" in first.request_messages[1].content
    # Both calls saw the secret in their prompt: their token ids would spell it out.
    assert first.prompt_token_ids is None and first.metadata["token_ids_dropped"] == "redaction"
    assert second.prompt_token_ids is None
    assert stored.outcome() == 1.0


def test_unchanged_calls_keep_token_ids(store: Store) -> None:
    governor = _governor(store, ReplacingRedactor(), acme={})
    t = make_trajectory()
    store.apply_events(governor.govern(events_for(t)))
    stored = store.get_trajectory(t.id)
    assert all(c.has_token_ids for c in stored.llm_calls())


def test_metadata_capture_keeps_structure_only(store: Store) -> None:
    governor = _governor(store, ReplacingRedactor(), acme={"capture": "metadata"})
    t = make_trajectory(question="call me at +1 415 555 0100")
    store.apply_events(governor.govern(events_for(t)))
    stored = store.get_trajectory(t.id)
    dumped = stored.model_dump_json()
    assert "555 0100" not in dumped and "ships tomorrow" not in dumped and "shipped" not in dumped
    assert stored.capture == CaptureMode.metadata
    assert stored.task_input is None
    first, tool, _second = stored.steps
    assert [m.role for m in first.request_messages] == ["system", "user"]
    assert first.request_messages[1].content is None
    assert first.choices[0].message.tool_calls[0].function.name == "lookup_order"
    assert first.choices[0].message.tool_calls[0].function.arguments == ""
    assert first.prompt_token_ids is None and first.choices[0].completion_token_ids is None
    assert first.usage is not None and first.usage.total_tokens == 7 and first.latency_ms == 12.0
    assert tool.tool_name == "lookup_order" and tool.arguments is None and tool.result is None
    assert stored.metadata == {"intent": "order_status"}
    assert stored.outcome() == 1.0 and stored.status == t.status


def test_off_capture_drops_everything_and_agent_overrides_apply(store: Store) -> None:
    governor = _governor(
        store, ReplacingRedactor(), acme={"agent_capture": {"hr-bot": "off"}}, quiet={"capture": "off"}
    )
    hr = make_trajectory(agent="hr-bot")
    support = make_trajectory(agent="support")
    silent = make_trajectory(tenant_id="quiet")
    events = [*events_for(hr), *events_for(support), *events_for(silent)]
    governed = governor.govern(events)
    assert {e.trajectory_id for e in governed} == {support.id}
    store.apply_events(governed)
    assert store.get_trajectory(support.id).steps

    # A later batch without the start event: the run its caller carries (or the start event seen) decides.
    late = [e for e in events_for(hr) if isinstance(e, StepAppended)]
    assert governor.govern(late) == []
    fresh = Governor(engine_only(store), directory=governor.directory, redactor=ReplacingRedactor())
    late_support = [e for e in events_for(support) if isinstance(e, StepAppended)]
    assert len(fresh.govern(late_support, {support.id: support.run_capture()})) == len(late_support)
    # No run carried and no start event seen (a record spooled before records named their run): the strictest
    # of the tenant's policies (off) applies, whatever the store holds.
    assert fresh.govern(late_support) == []
    orphan = [e for e in events_for(make_trajectory(agent="support")) if isinstance(e, StepAppended)]
    assert fresh.govern(orphan) == []


def test_a_batch_after_its_start_is_governed_by_the_carried_run_without_reading_the_store(store: Store) -> None:
    """The writer's records name their run: a restarted writer's governor (nothing remembered) governs steps
    whose start event was applied batches ago by the agent and the capture the run asked for, and reads no
    trajectory back (`engine_only` raises on any read)."""
    governor = _governor(store, ReplacingRedactor(), acme={"agent_capture": {"hr-bot": "off"}})
    hr = make_trajectory(agent="hr-bot")
    consenting = make_trajectory(agent="support", question=f"key {SECRET}")
    consenting.capture = CaptureMode.metadata  # this run asked for less than its tenant's policy
    store.apply_events(governor.govern([events_for(hr)[0], events_for(consenting)[0]]))  # batch 1: the starts
    restarted = Governor(engine_only(store), directory=governor.directory, redactor=ReplacingRedactor())
    later = [e for t in (hr, consenting) for e in events_for(t)[1:]]
    governed = restarted.govern(later, {t.id: t.run_capture() for t in (hr, consenting)})
    assert {e.trajectory_id for e in governed} == {consenting.id}  # hr-bot: off
    store.apply_events(governed)
    stored = store.get_trajectory(consenting.id)
    assert stored.steps and stored.outcome() == 1.0
    dumped = stored.model_dump_json()
    assert SECRET not in dumped and not names_number("4411", dumped)  # metadata: no text


def test_failing_redactor_fails_closed_and_is_audited(store: Store) -> None:
    governor = _governor(store, ExplodingRedactor(), acme={})
    t = make_trajectory(question=f"key {SECRET}", tool_args={"token": SECRET}, answer=f"your key {SECRET}")
    store.apply_events(governor.govern(events_for(t)))
    stored = store.get_trajectory(t.id)
    dumped = stored.model_dump_json()
    assert SECRET not in dumped and not names_number("4411", dumped)
    assert REDACTION_FAILED in dumped
    first, tool, second = stored.steps
    assert first.request_messages[1].content == REDACTION_FAILED
    assert tool.arguments == {"token": REDACTION_FAILED}
    assert second.choices[0].message.content == REDACTION_FAILED
    assert first.prompt_token_ids is None
    assert stored.task_input == {"ticket": REDACTION_FAILED}
    assert stored.outcome() == 1.0  # signals' values survive
    failures = AuditLog(store.engine).query(action=AuditAction.redaction_failed)
    assert len(failures) == 1 and failures[0].target == f"trajectory:{t.id}"
    assert SECRET not in str(failures[0].details)


def test_redactor_that_loses_events_fails_closed(store: Store) -> None:
    class Lossy:
        def redact_events(self, events: list[Event]) -> list[Event]:
            return events[:-1]

    governor = _governor(store, Lossy(), acme={})
    t = make_trajectory(question=f"key {SECRET}")
    governed = governor.govern(events_for(t))
    assert len(governed) == len(events_for(t))
    assert SECRET not in "".join(e.model_dump_json() for e in governed)


def test_real_engine_with_a_failing_recognizer_fails_closed_and_is_audited(store: Store) -> None:
    from evolvable.governance.redaction import default_recognizers

    class ExplodingRecognizer:
        kind = "EXPLODING"

        def find(self, text: str, lowered: str) -> list[Any]:
            if "boom" in lowered:
                raise RuntimeError(f"cannot parse {text}")
            return []

    directory = TenantDirectory(store.engine)
    directory.create_tenant("acme")
    governor = Governor(store, directory=directory, recognizers=[*default_recognizers(), ExplodingRecognizer()])
    clean = make_trajectory(question="mail me at someone@example.com")
    broken = make_trajectory(question=f"boom: my key is {SECRET}")
    store.apply_events(governor.govern([*events_for(clean), *events_for(broken)]))
    ok = store.get_trajectory(clean.id)
    assert "someone@example.com" not in ok.model_dump_json() and "<EMAIL_1>" in ok.model_dump_json()
    bad = store.get_trajectory(broken.id)
    assert SECRET not in bad.model_dump_json()
    assert bad.steps[0].request_messages[1].content == REDACTION_FAILED
    failures = AuditLog(store.engine).query(action=AuditAction.redaction_failed)
    assert [f.target for f in failures] == [f"trajectory:{broken.id}"]
    assert failures[0].details["stages"] == ["EXPLODING:RuntimeError"]


def test_a_run_can_ask_for_less_capture_never_more(store: Store) -> None:
    governor = _governor(store, ReplacingRedactor(), acme={}, strict={"capture": "metadata"})
    private = make_trajectory(question="do not keep my words")
    private.capture = CaptureMode.metadata
    greedy = make_trajectory(tenant_id="strict", question="keep everything please")
    store.apply_events(governor.govern([*events_for(private), *events_for(greedy)]))
    assert "do not keep" not in store.get_trajectory(private.id).model_dump_json()
    assert "keep everything" not in store.get_trajectory(greedy.id).model_dump_json()
    # Later batches of the private run (no start event) still follow what it asked for, as their caller carries it.
    late = make_trajectory(question="late words")
    late.id = private.id
    steps = [e for e in events_for(late) if isinstance(e, StepAppended)]
    fresh = Governor(engine_only(store), directory=governor.directory, redactor=ReplacingRedactor())
    governed = fresh.govern(steps, {private.id: private.run_capture()})
    assert all(e.step.kind != "llm_call" or not e.step.request_messages[1].content for e in governed)


def test_governed_events_are_counted_by_the_mode_applied(store: Store) -> None:
    from evolvable.telemetry import metrics

    governor = _governor(store, ReplacingRedactor(), acme={}, quiet={"capture": "metadata"})
    full, metadata = make_trajectory(tenant_id="acme"), make_trajectory(tenant_id="quiet")

    def counted(mode: str) -> float:
        return float(metrics.GOVERNED_EVENTS.labels(mode)._value.get())

    before = counted("full"), counted("metadata")
    events = events_for(full) + events_for(metadata) + events_for(make_trajectory(tenant_id="acme"))
    governor.govern(events)
    assert counted("full") - before[0] == len(events) - len(events_for(metadata))
    assert counted("metadata") - before[1] == len(events_for(metadata))
