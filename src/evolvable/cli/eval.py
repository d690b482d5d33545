"""`evolvable eval` and `evolvable tasks ...`: generate support-desk tasks and evaluate a harness on them."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from evolvable.protocol.harness import Harness
    from evolvable.workloads.support_desk import EvalReport

tasks_app = typer.Typer(help="Support-desk task files and starting harnesses.", no_args_is_help=True)


def load_harness(path: Path) -> Harness:
    """A harness from a JSON or YAML file."""
    import json

    import yaml
    from pydantic import ValidationError

    from evolvable.errors import ConversionError
    from evolvable.protocol.harness import Harness

    if not path.exists():
        raise ConversionError(f"harness file {path} does not exist")
    text = path.read_text(encoding="utf-8")
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
        return Harness.model_validate(data)
    except (ValueError, yaml.YAMLError, ValidationError) as err:
        raise ConversionError(f"{path} is not a harness: {err}") from None


def print_report(report: EvalReport) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"support desk · {report.model} · harness {report.harness_version or 'proxy'}")
    for column in ("intent", "n", "success", "95% CI", "mean reward"):
        table.add_column(column, justify="left" if column == "intent" else "right")
    rows = [*report.per_intent.items(), ("overall", report.overall)]
    for name, stats in rows:
        table.add_row(
            f"[bold]{name}[/]" if name == "overall" else name,
            str(stats.n),
            f"{stats.rate:.0%} ({stats.successes})",
            f"{stats.ci_low:.0%}–{stats.ci_high:.0%}",
            f"{stats.mean_reward:.2f}",
            end_section=name == rows[-2][0],
        )
    console = Console()
    console.print(table)
    low, high = report.safety_ci
    console.print(
        f"safety pass rate {report.safety_pass_rate:.0%} (95% CI {low:.0%}–{high:.0%})"
        + (f", violations {report.safety_violations}" if report.safety_violations else "")
        + (f", [red]{report.errors} upstream errors[/]" if report.errors else "")
        + f", {report.wall_s:.0f}s",
        highlight=False,
    )
    if report.process_labels:
        console.print("process signals: " + ", ".join(f"{k} {v}" for k, v in report.process_labels.items()))


def eval_command(
    tasks: Path = typer.Option(..., "--tasks", help="JSONL task file (see `evolvable tasks generate`)."),
    endpoint: str = typer.Option(..., "--endpoint", help="OpenAI-compatible base URL, e.g. http://127.0.0.1:8500/v1."),
    model: str = typer.Option("smollm2-135m", "--model", help="Model name to request."),
    harness_file: Path | None = typer.Option(None, "--harness", help="Harness JSON/YAML (default: built-in)."),
    concurrency: int = typer.Option(8, "--concurrency", min=1, help="Episodes in flight at once."),
    api_key: str | None = typer.Option(None, "--api-key", help="API key for the endpoint."),
    max_turns: int = typer.Option(4, "--max-turns", min=1),
    max_tokens: int = typer.Option(64, "--max-tokens", min=1),
    record: bool = typer.Option(False, "--record/--no-record", help="Open a proxy session per episode."),
    proxy_harness: bool = typer.Option(False, "--proxy-harness", help="Let the proxy apply the agent's harness."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON instead of a table."),
) -> None:
    """Evaluate a harness on a task file: success with a confidence interval, per intent, and safety."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from evolvable.workloads.support_desk import default_harness, evaluate, load_tasks

    task_list = load_tasks(tasks)
    if not task_list:
        raise typer.BadParameter(f"{tasks} holds no tasks", param_hint="--tasks")
    harness = None if proxy_harness else (load_harness(harness_file) if harness_file else default_harness())
    progress = Progress(
        TextColumn("episodes"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), transient=True, disable=as_json
    )
    with progress:
        bar = progress.add_task("episodes", total=len(task_list))
        report = evaluate(
            task_list,
            endpoint,
            model,
            harness,
            concurrency=concurrency,
            api_key=api_key,
            record=record,
            max_turns=max_turns,
            max_tokens=max_tokens,
            apply_harness="proxy" if proxy_harness else "client",
            on_episode=lambda _: progress.advance(bar),
        )
    if report.errors == len(task_list):
        first = next(e.error for e in report.episodes if e.error)
        from evolvable.errors import UpstreamError

        raise UpstreamError(f"every episode failed at the endpoint {endpoint}: {first}")
    if as_json:
        typer.echo(report.model_dump_json(indent=2))
    else:
        print_report(report)


@tasks_app.command("generate")
def generate(
    split: str = typer.Option("holdout", "--split", help="train, holdout or safety."),
    n: int = typer.Option(40, "-n", "--n", min=0, help="How many tasks."),
    seed: int = typer.Option(0, "--seed"),
    output: Path = typer.Option(..., "-o", "--output", help="JSONL file to write."),
) -> None:
    """Write `n` deterministic support-desk tasks of a split as JSONL."""
    from evolvable.workloads.support_desk import generate_tasks, save_tasks

    count = save_tasks(generate_tasks(split, n, seed), output)  # type: ignore[arg-type]
    typer.echo(f"wrote {count} {split} tasks to {output}")


@tasks_app.command("harness")
def harness(
    kind: str = typer.Argument("default", help="weak or default."),
    exemplars: int = typer.Option(0, "--exemplars", min=0, help="Add N oracle exemplars from the train split."),
    seed: int = typer.Option(0, "--seed", help="Seed of the train tasks the exemplars come from."),
    output: Path = typer.Option(..., "-o", "--output", help="JSON file to write."),
) -> None:
    """Write a starting harness as JSON (to edit, or to pass to `evolvable eval --harness`)."""
    from evolvable.workloads.support_desk import default_harness, generate_tasks, oracle_exemplars, weak_harness

    if kind not in ("weak", "default"):
        raise typer.BadParameter("expected weak or default", param_hint="KIND")
    memory = oracle_exemplars(generate_tasks("train", exemplars, seed)) if exemplars else []
    built = weak_harness() if kind == "weak" else default_harness()
    built = built.model_copy(update={"memory": memory, "memory_k": 2 if memory else built.memory_k})
    output.write_text(built.model_dump_json(indent=2) + "\n", encoding="utf-8")
    typer.echo(f"wrote {kind} harness {built.content_hash()} to {output}")


def register(app: typer.Typer) -> None:
    app.command("eval")(eval_command)
    app.add_typer(tasks_app, name="tasks")
