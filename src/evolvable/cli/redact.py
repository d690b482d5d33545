"""`evolvable redact`: a line filter that removes PII and secrets.

Exactly one output line per input line, line endings kept, so it can sit in any pipeline (`tail -f app.log |
evolvable redact`). Placeholders are consistent for the whole run. A PEM key spread over several lines is
followed across lines: its BEGIN line and every body line up to END become the key's placeholder.
"""

from __future__ import annotations

import sys

import typer


def register(app: typer.Typer) -> None:
    app.command("redact")(redact)


def redact(
    jsonl: bool = typer.Option(False, "--jsonl", help="Each line is a JSON record: redact its string values."),
    person_names: bool = typer.Option(
        False,
        "--person-names",
        help="Add the spaCy NER stage for person names (names are found by default; needs spaCy and a model).",
    ),
) -> None:
    """Read lines from stdin and write each one redacted to stdout."""
    import json
    import re

    from evolvable.cli._console import err_console
    from evolvable.governance.redaction import FAILED_MARKER, PlaceholderMap, RedactionEngine

    failures: list[str] = []
    engine = RedactionEngine(
        person_names=person_names, on_failure=lambda kind, err: failures.append(f"{kind}: {type(err).__name__}")
    )
    placeholders = PlaceholderMap()
    pem_begin = re.compile(r"-----BEGIN[ A-Z0-9]{0,20}PRIVATE KEY(?: BLOCK)?-----")
    pem_end = re.compile(r"-----END[ A-Z0-9]{0,20}PRIVATE KEY(?: BLOCK)?-----")
    pem_placeholder: str | None = None
    bad_lines = 0
    out = sys.stdout.buffer
    for number, raw in enumerate(sys.stdin.buffer, start=1):
        body = raw.rstrip(b"\r\n")
        ending = raw[len(body) :]
        line = body.decode("utf-8", errors="surrogateescape")
        failures.clear()
        if pem_placeholder is not None:  # inside a multi-line private key
            redacted = pem_placeholder
            if pem_end.search(line):
                pem_placeholder = None
        elif jsonl:
            if not line.strip():
                redacted = line
            else:
                try:
                    record = json.loads(line)
                except ValueError as err:
                    err_console.print(f"line {number}: not valid JSON ({err}); wrote a failure marker", markup=False)
                    bad_lines += 1
                    redacted = json.dumps(FAILED_MARKER)
                else:
                    value, _ = engine.redact_value(record, placeholders)
                    redacted = json.dumps(value, ensure_ascii=False)
        else:
            redacted = engine.redact_text(line, placeholders)
            begin = pem_begin.search(line)
            if begin and not pem_end.search(line, begin.end()):
                pem_placeholder = placeholders.placeholder("PRIVATE_KEY", line[begin.start() :])
        if failures:
            err_console.print(f"line {number}: redaction failed ({'; '.join(failures)}); wrote a failure marker")
            bad_lines += 1
        out.write(redacted.encode("utf-8", errors="surrogateescape") + ending)
        out.flush()
    if bad_lines:
        raise typer.Exit(1)
