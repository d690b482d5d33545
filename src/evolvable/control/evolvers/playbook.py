"""Itemised playbooks: skills and the prompt's learned rules grow by small edits, never by a rewrite.

ACE (agentic context engineering) showed that letting a model rewrite a whole context loses what
worked ("context collapse"), while itemised add / patch updates keep it. A playbook is the base
text plus a list of items ("- ..." lines); an evolver model answers with operations on the items
(`add` a new item, `patch` item N), and `apply` refuses anything else. Items are only ever added
or reworded here; taking one out is left to the gates (a candidate that drops one is simply
another candidate, never this module's doing).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

MAX_ITEM_CHARS = 300


@dataclass
class Playbook:
    base: str = ""
    items: list[str] = field(default_factory=list)
    max_items: int = 24

    @classmethod
    def from_prompt(cls, prompt: str, header: str) -> Playbook:
        """A system prompt: the text before `header`, then one item per '- ' line after it."""
        base, sep, rest = prompt.partition(header)
        items = [line[2:].strip() for line in rest.splitlines() if line.startswith("- ")] if sep else []
        return cls(base.rstrip(), items)

    @classmethod
    def from_skill(cls, instructions: str) -> Playbook:
        """Skill instructions: '- ' lines are items; older free text becomes one item."""
        lines = [line[2:].strip() for line in instructions.splitlines() if line.startswith("- ")]
        if not lines and instructions.strip():
            lines = [instructions.strip()]
        return cls("", lines)

    def render_prompt(self, header: str) -> str:
        if not self.items:
            return self.base
        return f"{self.base}\n\n{header}\n" + "\n".join(f"- {item}" for item in self.items)

    def render_skill(self) -> str:
        return "\n".join(f"- {item}" for item in self.items)

    def numbered(self) -> str:
        return "\n".join(f"{i}. {item}" for i, item in enumerate(self.items, start=1)) or "(empty)"

    def extend(self, items: Sequence[str]) -> list[str]:
        """Append the items not already present (up to `max_items`); returns those added."""
        added = []
        for item in items:
            text = " ".join(item.split())[:MAX_ITEM_CHARS]
            if text and text not in self.items and len(self.items) < self.max_items:
                self.items.append(text)
                added.append(text)
        return added

    def apply(self, operations: Any) -> tuple[list[dict[str, Any]], list[str]]:
        """Apply `[{"op": "add", "text"}, {"op": "patch", "item": N, "text"}]`; (applied, refused with why)."""
        applied: list[dict[str, Any]] = []
        refused: list[str] = []
        if not isinstance(operations, list):
            return applied, ["operations is not a list"]
        for op in operations:
            kind = op.get("op") if isinstance(op, dict) else None
            text = op.get("text") if isinstance(op, dict) else None
            if not isinstance(text, str) or not text.strip():
                refused.append(f"{op!r}: no text")
            elif kind == "add":
                if self.extend([text]):
                    applied.append({"op": "add", "text": self.items[-1]})
                else:
                    refused.append(f"add {text[:60]!r}: duplicate or playbook full")
            elif kind == "patch":
                index = op.get("item")
                if not isinstance(index, int) or isinstance(index, bool) or not 1 <= index <= len(self.items):
                    refused.append(f"patch {index!r}: no such item")
                    continue
                self.items[index - 1] = " ".join(text.split())[:MAX_ITEM_CHARS]
                applied.append({"op": "patch", "item": index, "text": self.items[index - 1]})
            else:
                refused.append(f"{kind!r}: only add and patch are allowed")
        return applied, refused
