"""Quality filters and duplicate detection (pure functions, no database)."""

from __future__ import annotations

import pytest

from evolvable.errors import GovernanceError
from evolvable.governance.curation import Deduplicator, QualityConfig, conversation_text, quality_issues
from evolvable.protocol.models import CaptureMode, TrajectoryStatus

from .builders import make_trajectory


def test_quality_filters_name_their_reason() -> None:
    config = QualityConfig()
    assert quality_issues(make_trajectory(), config) == []
    assert quality_issues(make_trajectory(status=TrajectoryStatus.running), config) == ["status_running"]
    assert quality_issues(make_trajectory(status=TrajectoryStatus.abandoned), config) == ["status_abandoned"]
    assert quality_issues(make_trajectory(status=TrajectoryStatus.failed), config) == []
    assert quality_issues(make_trajectory(error=True), config) == ["upstream_error"]
    assert quality_issues(make_trajectory(finish_reason="length"), config) == ["truncated"]
    no_ids = make_trajectory(token_ids=False)
    assert quality_issues(no_ids, config) == []
    assert quality_issues(no_ids, QualityConfig.parse(["rl"])) == ["missing_token_ids"]
    metadata_only = make_trajectory()
    metadata_only.capture = CaptureMode.metadata
    assert quality_issues(metadata_only, config) == ["no_content"]
    assert quality_issues(make_trajectory(), QualityConfig(max_steps=2)) == ["too_many_steps"]
    assert quality_issues(make_trajectory(), QualityConfig(min_steps=4)) == ["too_few_steps"]
    assert quality_issues(make_trajectory(answer="x" * 5000), QualityConfig(max_chars=1000)) == ["too_long"]
    assert quality_issues(make_trajectory(), QualityConfig(min_chars=100_000)) == ["too_short"]
    assert quality_issues(make_trajectory(status=TrajectoryStatus.running, error=True), QualityConfig.off()) == []


def test_quality_spec_parsing() -> None:
    assert QualityConfig.parse(["max_steps=10", "drop_truncated=false"]).max_steps == 10
    assert QualityConfig.parse(["statuses=completed"]).statuses == [TrajectoryStatus.completed]
    assert QualityConfig.parse(["none"]).drop_upstream_errors is False
    for bad in (["max_steps"], ["colour=blue"], ["max_steps=many"], ["statuses=finished"]):
        with pytest.raises(GovernanceError):
            QualityConfig.parse(bad)


def test_conversation_text_is_normalized_and_skips_resent_history() -> None:
    text = conversation_text(make_trajectory(question="Where   is my ORDER 4411?"))
    assert text.count("where is my order 4411?") == 2  # task input + the first user turn, not resent copies
    assert "your order 4411 ships tomorrow." in text
    assert "lookup_order" in text


def test_exact_and_near_duplicates() -> None:
    base = "user: where is my order 4411? i ordered a blue kettle last week and it has not arrived yet. " * 3
    near = base.replace("4411", "4412")
    other = "user: please reset my password, the login page says my account is locked after three tries. " * 3
    exact = Deduplicator("exact")
    assert [exact.check(t) for t in (base, base, near, other)] == [None, "duplicate_exact", None, None]
    fuzzy = Deduplicator("near")
    assert [fuzzy.check(t) for t in (base, base, near, other)] == [None, "duplicate_exact", "duplicate_near", None]
    off = Deduplicator("none")
    assert [off.check(t) for t in (base, base)] == [None, None]
    with pytest.raises(GovernanceError):
        Deduplicator("fuzzy")  # type: ignore[arg-type]
