"""`evolvable redact`, run as the real command: one output line per input line, JSONL mode, bad lines."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

EVOLVABLE = [str(Path(sys.executable).with_name("evolvable"))]


def _run(stdin: bytes, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*EVOLVABLE, "redact", *args], input=stdin, capture_output=True, timeout=120, check=False)


def test_text_mode_keeps_lines_aligned_and_endings_intact() -> None:
    lines = [
        b"mail bob@example.com\r\n",
        b"\n",
        b"nothing here, order ORD-2026-1\n",
        b"-----BEGIN RSA PRIVATE KEY-----\n",
        b"MIIEpAIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun\n",
        b"-----END RSA PRIVATE KEY-----\n",
        "caf\u00e9 \u2014 card 4111 1111 1111 1111\n".encode(),
        b"last line without newline bob@example.com",
    ]
    result = _run(b"".join(lines))
    assert result.returncode == 0, result.stderr
    out = result.stdout.splitlines(keepends=True)
    assert len(out) == len(lines)
    assert out[0] == b"mail <EMAIL_1>\r\n" and out[1] == b"\n" and out[2] == lines[2]
    assert out[3:6] == [b"<PRIVATE_KEY_1>\n"] * 3
    assert out[6] == "caf\u00e9 \u2014 card <CREDIT_CARD_1>\n".encode()
    assert out[7] == b"last line without newline <EMAIL_1>"


def test_jsonl_mode_redacts_values_and_reports_bad_lines() -> None:
    records = [
        json.dumps({"user": "bob@example.com", "config": {"password": "hunter2!x"}, "n": 4111111111111111}),
        "{not json",
        "",
        json.dumps({"msg": "call +44 20 7946 0958", "ok": True}),
    ]
    result = _run("\n".join(records).encode() + b"\n", "--jsonl")
    assert result.returncode == 1
    assert b"line 2" in result.stderr
    out = result.stdout.decode().splitlines()
    assert len(out) == 4
    assert json.loads(out[0]) == {"user": "<EMAIL_1>", "config": {"password": "<SECRET_1>"}, "n": "<CREDIT_CARD_1>"}
    assert json.loads(out[1]) == "<REDACTION_FAILED>" and out[2] == ""
    assert json.loads(out[3]) == {"msg": "call <PHONE_1>", "ok": True}
