"""`evolvable validate`, `evolvable convert` and `evolvable schema`: ATDP files on the command line."""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from pathlib import Path
from typing import Any

import typer

from evolvable.cli._console import console, err_console
from evolvable.errors import ConversionError


class FromFormat(StrEnum):
    openai_chat = "openai-chat"
    otel = "otel"
    atdp = "atdp"


class ToFormat(StrEnum):
    atdp = "atdp"
    otel = "otel"
    adp = "adp"
    sft = "sft"
    preference = "preference"
    rl_samples = "rl-samples"


def _read_text(path: Path) -> str:
    if str(path) == "-":
        return sys.stdin.read()
    if not path.exists():
        raise ConversionError(f"{path}: no such file")
    return path.read_text()


def _json_records(text: str, source: str) -> list[Any]:
    """A JSON document (object or list) or JSONL; errors name the line."""
    stripped = text.strip()
    if not stripped:
        return []
    try:
        doc = json.loads(stripped)
        return doc if isinstance(doc, list) else [doc]
    except json.JSONDecodeError:
        pass
    records = []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as err:
            raise ConversionError(f"{source}:{n}: invalid JSON ({err.msg})") from None
    return records


def validate(
    file: Path = typer.Argument(..., help="ATDP JSON (one trajectory or a list) or JSONL; '-' for stdin."),
) -> None:
    """Validate ATDP trajectories; exit 0 when all are valid, 1 otherwise (with line numbers and reasons)."""
    from evolvable.protocol.validation import load_file

    results = load_file(_read_text(file))
    bad = [r for r in results if r.trajectory is None]
    for r in bad:
        for reason in r.reasons:
            err_console.print(f"{file}:{r.line}: {reason}", highlight=False, markup=False)
    if not results:
        err_console.print(f"{file}: no trajectories found")
        raise typer.Exit(1)
    if bad:
        err_console.print(f"[red]{len(bad)} of {len(results)} invalid[/]")
        raise typer.Exit(1)
    console.print(f"[green]{len(results)} valid[/] trajectories in {file}")


def _load(fmt: FromFormat, text: str, source: str) -> list[Any]:
    from evolvable.protocol.converters import from_openai_chat, from_otel, merge_documents
    from evolvable.protocol.validation import load_file

    if fmt == FromFormat.atdp:
        results = load_file(text)
        bad = [r for r in results if r.trajectory is None]
        if bad:
            first = bad[0]
            raise ConversionError(f"{source}:{first.line}: invalid ATDP: {'; '.join(first.reasons[:3])}")
        return [r.trajectory for r in results]
    records = _json_records(text, source)
    if fmt == FromFormat.openai_chat:
        return from_openai_chat(records)
    # A collector file holds one export batch per line; a trace's spans may span several lines.
    return from_otel(merge_documents(records))


def _dump(fmt: ToFormat, trajectories: list[Any]) -> tuple[str, int]:
    from evolvable.protocol import converters as cv

    def jsonl(items: list[Any]) -> str:
        return "".join(json.dumps(i, ensure_ascii=False) + "\n" for i in items)

    if fmt == ToFormat.atdp:
        return "".join(t.model_dump_json() + "\n" for t in trajectories), len(trajectories)
    if fmt == ToFormat.otel:
        return json.dumps(cv.to_otel(trajectories)) + "\n", len(trajectories)
    if fmt == ToFormat.adp:
        items = [cv.to_adp(t) for t in trajectories]
    elif fmt == ToFormat.sft:
        items = cv.to_sft_records(trajectories)
    elif fmt == ToFormat.preference:
        items = cv.to_preference_pairs(trajectories)
    else:
        items = [s.model_dump(mode="json") for t in trajectories for s in cv.trajectory_to_samples(t)]
    return jsonl(items), len(items)


def convert(
    input: Path = typer.Argument(..., help="Input file; '-' for stdin."),
    from_: FromFormat = typer.Option(..., "--from", help="Input format."),
    to: ToFormat = typer.Option(..., "--to", help="Output format."),
    output: Path = typer.Option(..., "-o", "--output", help="Output file; '-' for stdout."),
) -> None:
    """Convert agent traces between ATDP, OpenAI chat logs, OpenTelemetry GenAI spans and training formats."""
    trajectories = _load(from_, _read_text(input), str(input))
    text, count = _dump(to, trajectories)
    if str(output) == "-":
        sys.stdout.write(text)
    else:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text)
        err_console.print(f"{len(trajectories)} trajectories -> {count} {to.value} records in {output}")


def schema(
    write: Path | None = typer.Option(None, "--write", help="Write the JSON Schemas into this directory."),
    check: Path | None = typer.Option(None, "--check", help="Exit 1 if the schemas in this directory are stale."),
) -> None:
    """Print or write the ATDP JSON Schemas."""
    from evolvable.protocol.schema import render, schemas

    docs = schemas()
    if check is not None:
        stale = [n for n, d in docs.items() if not (check / n).exists() or (check / n).read_text() != render(d)]
        if stale:
            err_console.print(f"stale schemas in {check}: {', '.join(stale)}; run: evolvable schema --write {check}")
            raise typer.Exit(1)
        console.print(f"schemas in {check} are current")
        return
    if write is not None:
        write.mkdir(parents=True, exist_ok=True)
        for name, doc in docs.items():
            (write / name).write_text(render(doc))
        console.print(f"wrote {len(docs)} schemas to {write}")
        return
    sys.stdout.write(render(docs["atdp-trajectory.schema.json"]))


def register(app: typer.Typer) -> None:
    app.command("validate")(validate)
    app.command("convert")(convert)
    app.command("schema")(schema)
