"""Task clustering from ticket text (the fallback when runs carry no cluster)."""

from __future__ import annotations

from evolvable.control.clustering import TfidfKMeans, adjusted_rand_index, normalized_mutual_info
from evolvable.workloads.support_desk.tasks import generate_tasks


def test_partition_metrics_on_hand_cases() -> None:
    assert adjusted_rand_index(list("aabb"), list("xxyy")) == 1.0
    assert normalized_mutual_info(list("aabb"), list("xxyy")) == 1.0
    assert adjusted_rand_index(list("aabb"), list("xyxy")) < 0


def test_tfidf_kmeans_recovers_support_desk_intents_far_above_chance() -> None:
    train = generate_tasks("train", 120, seed=3)
    model = TfidfKMeans(k=6).fit([t.prompt() for t in train])
    assert adjusted_rand_index([t.intent for t in train], model.labels_) > 0.25
    holdout = generate_tasks("holdout", 60, seed=4)
    predicted = [model.predict(t.prompt()) for t in holdout]
    assert adjusted_rand_index([t.intent for t in holdout], predicted) > 0.25
    assert len(set(predicted)) > 3
