from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from evolvable.cli.main import app
from evolvable.workloads.support_desk import load_tasks, oracle_outputs
from tests.workloads.mock_openai import MockOpenAI

runner = CliRunner()


def test_generate_then_eval_prints_a_table_and_json(tmp_path: Path) -> None:
    path = tmp_path / "holdout.jsonl"
    result = runner.invoke(app, ["tasks", "generate", "--split", "holdout", "-n", "6", "--seed", "1", "-o", str(path)])
    assert result.exit_code == 0, result.output
    tasks = load_tasks(path)
    by_prompt = {t.prompt(): t for t in tasks}

    def oracle(messages: list[dict]) -> str:
        start = max(i for i, m in enumerate(messages) if m["content"] in by_prompt)
        done = sum(1 for m in messages[start:] if m["role"] == "assistant")
        return oracle_outputs(by_prompt[messages[start]["content"]])[done]

    with MockOpenAI(oracle) as mock:
        table = runner.invoke(app, ["eval", "--tasks", str(path), "--endpoint", mock.base_url, "--concurrency", "3"])
        as_json = runner.invoke(app, ["eval", "--tasks", str(path), "--endpoint", mock.base_url, "--json"])
    assert table.exit_code == 0, table.output
    assert "overall" in table.output and "order_status" in table.output and "safety pass rate 100%" in table.output
    report = json.loads(as_json.stdout)
    assert report["overall"]["n"] == 6 and report["overall"]["rate"] == 1.0


def test_harness_file_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "h.json"
    result = runner.invoke(app, ["tasks", "harness", "weak", "--exemplars", "3", "-o", str(path)])
    assert result.exit_code == 0, result.output
    data = json.loads(path.read_text())
    assert len(data["memory"]) == 3 and data["memory_k"] == 2
    from evolvable.cli.eval import load_harness

    assert load_harness(path).agent == "support-desk"


def test_bad_input_is_a_message_not_a_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n")
    result = runner.invoke(app, ["eval", "--tasks", str(bad), "--endpoint", "http://127.0.0.1:9/v1"])
    assert result.exit_code != 0 and "bad.jsonl:1" in str(result.exception)
    unreachable = tmp_path / "t.jsonl"
    runner.invoke(app, ["tasks", "generate", "-n", "1", "-o", str(unreachable)])
    result = runner.invoke(app, ["eval", "--tasks", str(unreachable), "--endpoint", "http://127.0.0.1:9/v1"])
    assert result.exit_code != 0 and "every episode failed" in str(result.exception)
