from __future__ import annotations

import json
from pathlib import Path

from evolvable.protocol.schema import render, schemas

SCHEMA_DIR = Path(__file__).resolve().parents[2] / "docs" / "schema"


def test_checked_in_schemas_are_current() -> None:
    for name, doc in schemas().items():
        path = SCHEMA_DIR / name
        assert path.exists(), f"missing {path}; run: evolvable schema --write docs/schema"
        assert path.read_text() == render(doc), f"{name} is stale; run: evolvable schema --write docs/schema"


def test_schema_names_every_step_kind_and_the_version() -> None:
    doc = json.loads((SCHEMA_DIR / "atdp-trajectory.schema.json").read_text())
    text = json.dumps(doc)
    for kind in ("llm_call", "tool_call", "message", "handoff", "memory_op", "skill_use"):
        assert f'"{kind}"' in text
    assert doc["x-atdp-schema-version"]
