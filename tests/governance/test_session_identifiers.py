"""`Governor.redact_identifiers`: what of a proxy session's agent and task id reaches the `proxy_sessions` row.
The end-to-end check (every column of every table, both backends) is tests/proxy/test_redaction_coverage.py."""

from __future__ import annotations

from typing import Any

from evolvable.governance.pipeline import Governor
from evolvable.governance.redaction import FAILED_MARKER
from evolvable.store import Store

IDS = {"agent": "desk ops.lead@globex-mail.com", "task_id": "lookup_order"}


def test_identifiers_are_redacted_with_the_trajectory_map(store: Store) -> None:
    governor = Governor(store)
    assert governor.redact_identifiers("traj_1", IDS) == {"agent": "desk <EMAIL_1>", "task_id": "lookup_order"}
    # the same value in the same trajectory keeps its placeholder; another trajectory starts at 1
    again = {"agent": "ops.lead@globex-mail.com", "task_id": "other.person@initech.net"}
    assert governor.redact_identifiers("traj_1", again) == {"agent": "<EMAIL_1>", "task_id": "<EMAIL_2>"}
    assert governor.redact_identifiers("traj_2", {"agent": "x@initech.net", "task_id": None})["agent"] == "<EMAIL_1>"


def test_without_redaction_identifiers_are_kept(store: Store) -> None:
    assert Governor(store, redact=False).redact_identifiers("traj_1", IDS) == IDS


class _EventsOnly:
    def redact_events(self, events: list[Any]) -> list[Any]:
        return events


def test_a_custom_redactor_without_the_method_keeps_only_plainly_safe_identifiers(store: Store) -> None:
    governor = Governor(store, redactor=_EventsOnly())
    assert governor.redact_identifiers("traj_1", IDS) == {"agent": FAILED_MARKER, "task_id": "lookup_order"}
