from __future__ import annotations

import json
from pathlib import Path

from tests.workloads.mock_openai import MockOpenAI
from typer.testing import CliRunner

from evolvable.cli.main import app
from evolvable.workloads.support_desk import load_tasks, oracle_outputs

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


def test_comparison_table_and_plot(tmp_path: Path) -> None:
    from rich.console import Console

    from evolvable.workloads.support_desk import (
        EvalReport,
        comparison_table,
        generate_tasks,
        plot_comparison,
        run_episode,
        weak_harness,
    )

    tasks = generate_tasks("holdout", 6, seed=2)
    by_prompt = {t.prompt(): t for t in tasks}

    def oracle(messages: list[dict]) -> str:
        start = max(i for i, m in enumerate(messages) if m["content"] in by_prompt)
        done = sum(1 for m in messages[start:] if m["role"] == "assistant")
        return oracle_outputs(by_prompt[messages[start]["content"]])[done]

    import openai

    with MockOpenAI(oracle) as good, MockOpenAI(lambda _: "Sorry, I cannot help.") as bad:
        reports = {}
        for name, mock in (("before", bad), ("after", good)):
            client = openai.OpenAI(base_url=mock.base_url, api_key="x", max_retries=0)
            episodes = [run_episode(client, "m", t, weak_harness(), proxy_session=False) for t in tasks]
            reports[name] = EvalReport.from_episodes(
                episodes, model="m", endpoint=mock.base_url, harness_version=None, wall_s=0.0
            )
    assert reports["before"].success_rate == 1 / 6 and reports["after"].success_rate == 1.0
    console = Console(record=True, width=150)
    console.print(comparison_table(reports))
    text = console.export_text()
    assert "before" in text and "after" in text and "refund_out_of_policy" in text and "safety pass" in text
    png = plot_comparison(reports, tmp_path / "plots" / "success.png")
    assert png.read_bytes()[:4] == b"\x89PNG"
