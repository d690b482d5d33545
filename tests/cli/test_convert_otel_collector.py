"""`evolvable convert --from otel` on a collector file: one JSON document per line, a trace split across lines."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from evolvable.protocol import Trajectory

EVOLVABLE = [sys.executable, "-m", "evolvable.cli.main"]
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def _attr(key: str, value: Any) -> dict[str, Any]:
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    return {"key": key, "value": {"stringValue": value if isinstance(value, str) else json.dumps(value)}}


def _span(span_id: str, name: str, start_s: int, parent: str = "", **attrs: Any) -> dict[str, Any]:
    return {
        "traceId": TRACE,
        "spanId": span_id,
        "parentSpanId": parent,
        "name": name,
        "startTimeUnixNano": str(1_700_000_000_000_000_000 + start_s * 1_000_000_000),
        "endTimeUnixNano": str(1_700_000_000_000_000_000 + start_s * 1_000_000_000 + 500_000_000),
        "attributes": [_attr(k.replace("__", "."), v) for k, v in attrs.items()],
    }


def _line(*spans: dict[str, Any]) -> str:
    doc = {"resourceSpans": [{"resource": {}, "scopeSpans": [{"scope": {"name": "x"}, "spans": list(spans)}]}]}
    return json.dumps(doc) + "\n"


def _chat(span_id: str, start_s: int, question: str) -> dict[str, Any]:
    return _span(
        span_id,
        "chat gpt-4o",
        start_s,
        parent="a000000000000001",
        gen_ai__operation__name="chat",
        gen_ai__request__model="gpt-4o",
        gen_ai__input__messages=[{"role": "user", "parts": [{"type": "text", "content": question}]}],
        gen_ai__output__messages=[{"role": "assistant", "parts": [{"type": "text", "content": "ok"}]}],
    )


def test_a_trace_split_over_collector_lines_converts_to_one_trajectory(tmp_path: Path) -> None:
    root = _span("a000000000000001", "invoke_agent planner", 0, gen_ai__agent__name="planner")
    tool = _span(
        "a000000000000003",
        "execute_tool lookup",
        2,
        parent="a000000000000001",
        gen_ai__operation__name="execute_tool",
        gen_ai__tool__name="lookup",
    )
    # The exporter sends children first and the root last; line 3 re-sends the tool span (a retry).
    lines = [
        _line(_chat("a000000000000002", 1, "first?")),
        _line(tool),
        _line(tool, _chat("a000000000000004", 3, "second?"), root),
    ]
    src = tmp_path / "collector.jsonl"
    src.write_text("".join(lines))
    out = tmp_path / "atdp.jsonl"
    result = subprocess.run(
        [*EVOLVABLE, "convert", str(src), "--from", "otel", "--to", "atdp", "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    (trajectory,) = [Trajectory.model_validate_json(line) for line in out.read_text().splitlines()]
    assert trajectory.agent == "planner"
    assert [s.kind for s in trajectory.steps] == ["llm_call", "tool_call", "llm_call"]
    assert [m.content for s in trajectory.llm_calls() for m in s.request_messages] == ["first?", "second?"]


def test_a_collector_line_that_is_not_otlp_names_its_document(tmp_path: Path) -> None:
    src = tmp_path / "collector.jsonl"
    src.write_text(_line(_chat("a000000000000002", 1, "q")) + json.dumps({"spans": []}) + "\n")
    result = subprocess.run(
        [*EVOLVABLE, "convert", str(src), "--from", "otel", "--to", "atdp", "-o", "-"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert "document 2" in result.stderr and "resourceSpans" in result.stderr


def test_malformed_spans_in_a_collector_file_are_a_message_not_a_traceback(tmp_path: Path) -> None:
    src = tmp_path / "collector.jsonl"
    bad_time = _chat("a000000000000002", 1, "q") | {"startTimeUnixNano": "yesterday"}
    for text in (_line(bad_time), json.dumps({"resourceSpans": ["not an object"]}) + "\n"):
        src.write_text(text)
        result = subprocess.run(
            [*EVOLVABLE, "convert", str(src), "--from", "otel", "--to", "atdp", "-o", "-"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 2 and "Traceback" not in result.stderr
        assert "malformed span" in result.stderr or "not an OTLP" in result.stderr
