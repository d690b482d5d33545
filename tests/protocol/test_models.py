from __future__ import annotations

import pytest

import evolvable.protocol as protocol
from evolvable.errors import ProtocolError
from evolvable.protocol import (
    SCHEMA_VERSION,
    CompletionChoice,
    Signal,
    SignalKind,
    Trajectory,
    events_for,
    parse_trajectory,
)
from evolvable.protocol.validation import load_file


def test_round_trip_is_lossless(trajectory: Trajectory) -> None:
    again = parse_trajectory(trajectory.model_dump_json())
    assert again == trajectory
    assert [s.kind for s in again.steps] == [
        "llm_call",
        "tool_call",
        "handoff",
        "memory_op",
        "skill_use",
        "message",
        "llm_call",
    ]
    assert again.llm_calls()[0].has_token_ids
    assert again.outcome() == 1.0


def test_unknown_fields_are_rejected_with_location(trajectory: Trajectory) -> None:
    data = trajectory.model_dump(mode="json")
    data["steps"][1]["tool_nmae"] = "typo"
    with pytest.raises(ProtocolError) as info:
        parse_trajectory(data)
    assert any(r.startswith("steps.1.tool_call.tool_nmae") for r in info.value.reasons)


def test_bad_step_kind_and_dangling_signal_are_explained(trajectory: Trajectory) -> None:
    data = trajectory.model_dump(mode="json")
    data["steps"][0]["kind"] = "llm"
    with pytest.raises(ProtocolError) as info:
        parse_trajectory(data)
    assert "does not match any of the expected tags" in str(info.value)

    data = trajectory.model_dump(mode="json")
    data["signals"].append({"kind": "judge", "value": 0.5, "step_id": "nope"})
    with pytest.raises(ProtocolError, match="unknown step nope"):
        parse_trajectory(data)


def test_logprobs_must_align_with_token_ids() -> None:
    with pytest.raises(ValueError, match="must align"):
        CompletionChoice(completion_token_ids=[1, 2], logprobs=[-0.1])


def test_redacted_token_spans_must_be_ordered_ranges_within_the_completion() -> None:
    choice = CompletionChoice(
        completion_token_ids=[1, 2, 3, 4], logprobs=[-0.1, 0.0, 0.0, -0.2], redacted_token_spans=[(1, 3)]
    )
    assert choice.redacted_token_mask() == [False, True, True, False]
    assert CompletionChoice.model_validate_json(choice.model_dump_json()) == choice
    for bad in ([(2, 2)], [(0, 5)], [(2, 3), (1, 2)], [(-1, 1)]):
        with pytest.raises(ValueError, match="redacted_token_spans"):
            CompletionChoice(completion_token_ids=[1, 2, 3, 4], redacted_token_spans=bad)
    with pytest.raises(ValueError, match="needs completion_token_ids"):
        CompletionChoice(redacted_token_spans=[(0, 1)])
    assert CompletionChoice(completion_token_ids=[1]).redacted_token_mask() == [False]


def test_records_of_the_previous_minor_version_stay_valid(trajectory: Trajectory) -> None:
    assert SCHEMA_VERSION == "1.1.0"
    data = trajectory.model_dump(
        mode="json", exclude={"steps": {"__all__": {"choices": {"__all__": {"redacted_token_spans"}}}}}
    )
    data["schema_version"] = "1.0.0"
    assert parse_trajectory(data).llm_calls()[0].choices[0].redacted_token_spans is None


def test_signal_values_must_be_finite() -> None:
    with pytest.raises(ValueError, match="finite"):
        Signal(kind=SignalKind.judge, value=float("nan"))


def test_incompatible_major_version_is_rejected(trajectory: Trajectory) -> None:
    data = trajectory.model_dump(mode="json")
    data["schema_version"] = "2.0.0"
    with pytest.raises(ProtocolError, match="not compatible"):
        parse_trajectory(data)
    data["schema_version"] = SCHEMA_VERSION.split(".")[0] + ".99.0"
    assert parse_trajectory(data).id == trajectory.id


def test_events_rebuild_the_trajectory_with_stable_ids(trajectory: Trajectory) -> None:
    events = events_for(trajectory)
    assert [e.type for e in events][:2] == ["trajectory_started", "step_appended"]
    assert events[-1].type == "trajectory_ended"
    assert [e.event_id for e in events] == [e.event_id for e in events_for(trajectory)]
    assert len({e.event_id for e in events}) == len(events)


def test_load_file_reports_each_bad_jsonl_line(trajectory: Trajectory) -> None:
    good = trajectory.model_dump_json()
    text = "\n".join([good, '{"steps": [{"kind": "tool_call"}]}', "", "not json", good])
    results = load_file(text)
    assert [r.line for r in results if r.trajectory is None] == [2, 4]
    assert any("tool_name" in reason for reason in results[1].reasons)


def test_all_lists_the_public_names() -> None:
    exported = set(protocol.__all__)
    public = {n for n in dir(protocol) if not n.startswith("_") and n[0].isupper()}
    assert public - {"Annotated"} <= exported
    for name in exported:
        assert hasattr(protocol, name)
