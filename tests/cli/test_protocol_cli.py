"""`evolvable validate` / `convert` / `schema`, run as a user would: the installed command in a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from evolvable.protocol import (
    ChatMessage,
    CompletionChoice,
    LLMCallStep,
    Signal,
    SignalKind,
    Trajectory,
    TrajectoryStatus,
)

EVOLVABLE = [sys.executable, "-m", "evolvable.cli.main"]


def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*EVOLVABLE, *args], input=stdin, capture_output=True, text=True, timeout=120)


def _trajectory(i: int) -> Trajectory:
    return Trajectory(
        id=f"traj_{i}",
        agent="cli-test",
        task_id="t1",
        status=TrajectoryStatus.completed,
        steps=[
            LLMCallStep(
                id="s1",
                request_messages=[ChatMessage(role="user", content="2+2?")],
                choices=[
                    CompletionChoice(
                        message=ChatMessage(role="assistant", content=str(3 + i)),
                        completion_token_ids=[5, 6],
                        logprobs=[-0.1, -0.2],
                    )
                ],
                prompt_token_ids=[1, 2],
            )
        ],
        signals=[Signal(kind=SignalKind.outcome, value=float(i == 1))],
    )


@pytest.fixture
def atdp_file(tmp_path: Path) -> Path:
    path = tmp_path / "runs.jsonl"
    path.write_text("".join(_trajectory(i).model_dump_json() + "\n" for i in range(3)))
    return path


def test_validate_accepts_valid_jsonl(atdp_file: Path) -> None:
    result = run("validate", str(atdp_file))
    assert result.returncode == 0, result.stderr
    assert "3 valid" in result.stdout


def test_validate_reports_line_numbers_and_reasons(atdp_file: Path, tmp_path: Path) -> None:
    lines = atdp_file.read_text().splitlines()
    lines.insert(1, '{"status": "exploded"}')
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines) + "\n")
    result = run("validate", str(bad))
    assert result.returncode == 1
    assert f"{bad}:2: status: Input should be" in result.stderr
    assert "Traceback" not in result.stderr


def test_validate_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    result = run("validate", str(tmp_path / "nope.json"))
    assert result.returncode == 2
    assert "no such file" in result.stderr and "Traceback" not in result.stderr


def test_convert_atdp_to_each_format(atdp_file: Path, tmp_path: Path) -> None:
    for fmt, expected in (("atdp", 3), ("adp", 3), ("sft", 3), ("rl-samples", 3), ("preference", 1)):
        out = tmp_path / f"out.{fmt}.jsonl"
        result = run("convert", str(atdp_file), "--from", "atdp", "--to", fmt, "-o", str(out))
        assert result.returncode == 0, result.stderr
        records = [json.loads(line) for line in out.read_text().splitlines()]
        assert len(records) == expected, fmt
    sample = json.loads((tmp_path / "out.rl-samples.jsonl").read_text().splitlines()[0])
    assert sample["input_ids"] == [1, 2, 5, 6] and sample["loss_mask"] == [0, 0, 1, 1]


def test_convert_otel_round_trip_through_files(atdp_file: Path, tmp_path: Path) -> None:
    otel = tmp_path / "spans.json"
    assert run("convert", str(atdp_file), "--from", "atdp", "--to", "otel", "-o", str(otel)).returncode == 0
    back = tmp_path / "back.jsonl"
    result = run("convert", str(otel), "--from", "otel", "--to", "atdp", "-o", str(back))
    assert result.returncode == 0, result.stderr
    assert back.read_text() == atdp_file.read_text()


def test_convert_openai_chat_from_stdin(tmp_path: Path) -> None:
    record = {
        "request": {"messages": [{"role": "user", "content": "hi"}]},
        "response": {"id": "c1", "choices": [{"message": {"role": "assistant", "content": "hello"}}]},
    }
    result = run("convert", "-", "--from", "openai-chat", "--to", "atdp", "-o", "-", stdin=json.dumps(record) + "\n")
    assert result.returncode == 0, result.stderr
    (t,) = [Trajectory.model_validate_json(line) for line in result.stdout.splitlines()]
    assert t.steps[0].response.content == "hello"


def test_convert_rl_samples_without_token_ids_explains(tmp_path: Path) -> None:
    t = _trajectory(0)
    t.steps[0].prompt_token_ids = None
    path = tmp_path / "no_ids.json"
    path.write_text(t.model_dump_json())
    result = run("convert", str(path), "--from", "atdp", "--to", "rl-samples", "-o", str(tmp_path / "x"))
    assert result.returncode == 2
    assert "token ids" in result.stderr and "Traceback" not in result.stderr


def test_convert_bad_jsonl_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    path.write_text('{"request": {"messages": []}}\n{oops\n')
    result = run("convert", str(path), "--from", "openai-chat", "--to", "atdp", "-o", str(tmp_path / "x"))
    assert result.returncode == 2
    assert f"{path}:2: invalid JSON" in result.stderr


def test_schema_check_detects_staleness(tmp_path: Path) -> None:
    assert run("schema", "--write", str(tmp_path)).returncode == 0
    assert run("schema", "--check", str(tmp_path)).returncode == 0
    (tmp_path / "atdp-signal.schema.json").write_text("{}")
    assert run("schema", "--check", str(tmp_path)).returncode == 1
