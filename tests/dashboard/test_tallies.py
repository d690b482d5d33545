"""Tallies render exactly what prometheus_client's Counter and Histogram render for the same observations."""

from __future__ import annotations

import random
import re
import threading

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest
from prometheus_client.parser import text_string_to_metric_families

from evolvable.telemetry.tallies import TallyCounter, TallyHistogram

BUCKETS = (0.0001, 0.005, 0.01, 0.025, 1.0, 120.0)


def _without_created_values(text: str) -> str:
    """The exposition with `_created` timestamps blanked (the two registries were made at different instants)."""
    return re.sub(r"(_created(\{[^}]*\})?) \S+", r"\1 T", text)


Reference = tuple[Histogram, Counter]
Tallies = tuple[TallyHistogram, TallyCounter]


def _pair() -> tuple[CollectorRegistry, CollectorRegistry, Reference, Tallies]:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    reference = (
        Histogram("demo_seconds", "A histogram.", ["route", "protocol"], buckets=BUCKETS, registry=theirs),
        Counter("demo_requests", "A counter.", ["status"], registry=theirs),
    )
    tally = (
        TallyHistogram("demo_seconds", "A histogram.", ["route", "protocol"], ours, buckets=BUCKETS),
        TallyCounter("demo_requests", "A counter.", ["status"], ours),
    )
    return ours, theirs, reference, tally


@pytest.mark.parametrize("render", [generate_latest, openmetrics_latest])
def test_a_tally_renders_what_prometheus_client_renders(render) -> None:
    ours, theirs, (hist, count), (tally_hist, tally_count) = _pair()
    rng = random.Random(7)
    # bucket bounds exactly, just above them, zero, huge values, and random ones
    values = [*BUCKETS, *(b * 1.0001 for b in BUCKETS), 0.0, 1e12] + [rng.expovariate(20) for _ in range(500)]
    for i, value in enumerate(values):
        labels = ("/v1/chat/completions" if i % 3 else "/v1/messages", "chat" if i % 2 else "messages")
        hist.labels(*labels).observe(value)
        tally_hist.labels(*labels).observe(value)
        status = ("200", "502", "429")[i % 3]
        count.labels(status).inc()
        tally_count.labels(status).inc()
    assert _without_created_values(render(ours).decode()) == _without_created_values(render(theirs).decode())


def test_an_unused_tally_renders_its_help_and_type_only() -> None:
    ours, theirs, _, _ = _pair()
    assert generate_latest(ours) == generate_latest(theirs)


def test_concurrent_observations_are_all_counted() -> None:
    registry = CollectorRegistry()
    hist = TallyHistogram("load_seconds", "Load.", ["route"], registry, buckets=BUCKETS)
    count = TallyCounter("load_requests", "Load.", ["route"], registry)

    def observe() -> None:
        series, counter = hist.labels("/v1/x"), count.labels("/v1/x")
        for _ in range(20_000):
            series.observe(0.003)
            counter.inc()

    threads = [threading.Thread(target=observe) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    samples = {
        (s.name, s.labels.get("le")): s.value
        for family in text_string_to_metric_families(generate_latest(registry).decode())
        for s in family.samples
    }
    assert samples[("load_seconds_count", None)] == 80_000
    assert samples[("load_seconds_bucket", "0.005")] == 80_000
    assert samples[("load_seconds_bucket", "0.0001")] == 0
    assert samples[("load_requests_total", None)] == 80_000
    assert samples[("load_seconds_sum", None)] == pytest.approx(240.0)


def test_wrong_label_counts_and_negative_increments_are_refused() -> None:
    registry = CollectorRegistry()
    hist = TallyHistogram("bad_seconds", "Bad.", ["a", "b"], registry, buckets=BUCKETS)
    count = TallyCounter("bad_requests", "Bad.", ["a"], registry)
    with pytest.raises(ValueError, match="takes labels"):
        hist.labels("only-one")
    with pytest.raises(ValueError, match="non-negative"):
        count.labels("x").inc(-1)
    with pytest.raises(ValueError, match="increasing"):
        TallyHistogram("worse_seconds", "Bad.", ["a"], registry, buckets=(1.0, 0.5))
