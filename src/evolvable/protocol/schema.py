"""The published JSON Schemas of ATDP, generated from the models.

`python -m evolvable.protocol.schema DIR` (or `evolvable schema --write DIR`) regenerates
them; a test fails when the checked-in files under docs/schema/ are stale.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter

from evolvable.protocol.harness import Harness
from evolvable.protocol.models import SCHEMA_VERSION, Event, Signal, Trajectory


def schemas() -> dict[str, dict[str, Any]]:
    """File name -> JSON Schema document."""
    out: dict[str, dict[str, Any]] = {}
    for name, schema in (
        ("trajectory", Trajectory.model_json_schema()),
        ("event", TypeAdapter(Event).json_schema()),
        ("signal", Signal.model_json_schema()),
        ("harness", Harness.model_json_schema()),
    ):
        doc = {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": f"atdp/{SCHEMA_VERSION}/{name}.schema.json",
            "x-atdp-schema-version": SCHEMA_VERSION,
            **schema,
        }
        out[f"atdp-{name}.schema.json"] = doc
    return out


def render(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def write(directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, doc in schemas().items():
        path = directory / name
        path.write_text(render(doc))
        written.append(path)
    return written


if __name__ == "__main__":
    for p in write(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/schema")):
        print(p)
