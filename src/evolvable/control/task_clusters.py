"""Task clusters learned from traffic: fitted per (tenant, agent), stored as versioned artefacts, refitted on drift.

Agents that report their task type (trajectory metadata `cluster`) need none of this. For the others,
once `min_runs` finished runs of an agent carry task inputs, a TF-IDF + spherical k-means clusterer is
fitted on them and stored in `control_clusterers` (vocabulary, idf, centroids as JSON: every replica
and the harness router assign the same cluster to the same text). Statistics, memory retrieval, the
lever decision and canary analyses then read those clusters.

Drift rule: a run is *unexplained* when its task text is further than `min_similarity` (cosine) from
every centroid — new words, a new kind of task. When at least `min_runs / 2` runs arrived since the
fit and more than `drift_threshold` of them are unexplained, the clusterer is refitted on the current
window and stored as the next version, with the measured share as its reason.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np

from evolvable.control.clustering import TfidfKMeans
from evolvable.control.statistics import RunSummary
from evolvable.store.engine import Engine
from evolvable.store.repos.clusterers import ClustererRows, clusterer_rows

UNCLUSTERED = "all"
"""What statistics call a run with neither a reported cluster nor a clusterer."""


@dataclass(frozen=True)
class ClusteringConfig:
    enabled: bool = True
    min_runs: int = 30
    k: int | None = None
    drift_threshold: float = 0.2
    min_similarity: float = 0.2


@dataclass(frozen=True)
class FittedClusterer:
    version: int
    clusterer: TfidfKMeans
    created_at: datetime

    def predict(self, text: str) -> str:
        return self.clusterer.predict(text)


def to_artifact(model: TfidfKMeans) -> dict[str, object]:
    return {"vocab": model.vocab, "idf": model.idf.tolist(), "centroids": model.centroids.tolist()}


def from_artifact(data: dict[str, object]) -> TfidfKMeans:
    model = TfidfKMeans()
    vocab = data["vocab"]
    if not isinstance(vocab, dict):
        raise TypeError(f"a clusterer artifact's vocab is a mapping, not {type(vocab).__name__}")
    model.vocab = {str(k): int(v) for k, v in vocab.items()}
    model.idf = np.asarray(data["idf"], dtype=float)
    model.centroids = np.asarray(data["centroids"], dtype=float)
    return model


def similarities(model: TfidfKMeans, texts: Sequence[str]) -> np.ndarray:
    """Cosine similarity of each text to its nearest centroid (0 when no known word occurs)."""
    if not texts or not len(model.centroids):
        return np.zeros(len(texts))
    return np.asarray((model._vectors(texts) @ model.centroids.T).max(axis=1))


class ClustererStore:
    """Versioned clusterer artefacts in the store, cached by version (one query per lookup, no refits)."""

    def __init__(self, rows: ClustererRows | Engine) -> None:
        self.rows = clusterer_rows(rows)
        self._cache: dict[tuple[str, str, int], FittedClusterer] = {}
        self._lock = threading.Lock()

    def save(self, tenant: str, agent: str, model: TfidfKMeans, *, fitted_on: int, reason: str) -> FittedClusterer:
        version, created = self.rows.add(
            tenant,
            agent,
            {
                "method": "tfidf-kmeans",
                "k": len(model.centroids),
                "fitted_on": fitted_on,
                "reason": reason,
                "artifact": to_artifact(model),
            },
        )
        fitted = FittedClusterer(version, model, created)
        with self._lock:
            self._cache[(tenant, agent, version)] = fitted
        return fitted

    def latest(self, tenant: str, agent: str) -> FittedClusterer | None:
        found = self.latest_all(tenant=tenant, agent=agent)
        return found.get((tenant, agent))

    def latest_all(
        self, *, tenant: str | None = None, agent: str | None = None
    ) -> dict[tuple[str, str], FittedClusterer]:
        """The newest clusterer of every (tenant, agent) (the harness router loads them all on refresh)."""
        out: dict[tuple[str, str], FittedClusterer] = {}
        for key in self.rows.heads(tenant=tenant, agent=agent):
            with self._lock:
                cached = self._cache.get(key)
            if cached is None:
                artifact, created = self.rows.artifact(*key)
                cached = FittedClusterer(key[2], from_artifact(artifact), created)
                with self._lock:
                    self._cache[key] = cached
            out[(key[0], key[1])] = cached
        return out


class TaskClusters:
    """One tenant's clusterers: `for_agent` serves the current one, `update` fits or refits from the window."""

    def __init__(self, store: ClustererStore, tenant: str, config: ClusteringConfig | None = None) -> None:
        self.store = store
        self.tenant = tenant
        self.config = config or ClusteringConfig()

    def for_agent(self, agent: str) -> FittedClusterer | None:
        return self.store.latest(self.tenant, agent) if self.config.enabled else None

    def update(self, agent: str, runs: list[RunSummary]) -> tuple[FittedClusterer | None, str | None]:
        """Fit when none exists and enough runs lack a reported cluster; refit when drift says so.
        Returns the clusterer to use and a line saying what was done (None when nothing changed)."""
        current = self.for_agent(agent)
        if not self.config.enabled:
            return None, None
        texts = [r.task_text for r in runs if r.task_text and r.cluster == UNCLUSTERED]
        if current is None:
            if len(texts) < self.config.min_runs:
                return None, None
            return self._fit(agent, texts, f"first fit on {len(texts)} recorded task inputs")
        recent = [r.task_text for r in runs if r.task_text and r.started_at > current.created_at]
        if len(recent) < max(2, self.config.min_runs // 2):
            return current, None
        unexplained = float((similarities(current.clusterer, recent) < self.config.min_similarity).mean())
        if unexplained <= self.config.drift_threshold:
            return current, None
        window = [r.task_text for r in runs if r.task_text]
        return self._fit(
            agent,
            window,
            f"drift: {unexplained:.0%} of {len(recent)} new task inputs fit no cluster "
            f"(threshold {self.config.drift_threshold:.0%})",
        )

    def _fit(self, agent: str, texts: list[str], reason: str) -> tuple[FittedClusterer, str]:
        model = TfidfKMeans(k=self.config.k).fit(texts)
        fitted = self.store.save(self.tenant, agent, model, fitted_on=len(texts), reason=reason)
        return fitted, f"{agent}: task clusterer v{fitted.version} ({len(model.centroids)} clusters): {reason}"


def assign_clusters(runs: list[RunSummary], clusterer: FittedClusterer) -> None:
    """Give runs without a reported cluster the clusterer's (in place)."""
    for r in runs:
        if r.cluster == UNCLUSTERED and r.task_text:
            r.cluster = clusterer.predict(r.task_text)
