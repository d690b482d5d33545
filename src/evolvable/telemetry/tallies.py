"""Counters and histograms for series observed on every proxy request, at about a third of the cost.

`prometheus_client`'s `Histogram.observe` takes a lock per value it touches and runs its bucket search in
Python: the proxy's per-request series (a counter and up to four histograms) cost ~13 us per call on the
serving thread, about a fifth of Evolvable's own work per call; as tallies, ~4.6 us (docs/PERFORMANCE.md,
"Session 9"). A tally keeps each labelled series as plain numbers behind one lock, finds the bucket with
`bisect` (C), and renders the same exposition at scrape time through `prometheus_client`'s public metric
families: the same names, types, labels, buckets and `_created` samples as `Counter` and `Histogram`, so
dashboards and alerts see no difference.

The API is the part of `prometheus_client`'s the proxy uses: `labels(*values)` once per label set, then
`inc()` / `observe(value)`.
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_left
from collections.abc import Callable, Iterator, Sequence
from typing import Generic, TypeVar

from prometheus_client.metrics_core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.utils import floatToGoString

_go_float: Callable[[float], str] = floatToGoString
"""How `prometheus_client` writes a bucket bound (`le`), so the series keep their exact label values."""


class CounterSeries:
    """One labelled counter."""

    __slots__ = ("_lock", "created", "value")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.value = 0.0
        self.created = time.time()

    def inc(self, amount: float = 1.0) -> None:
        if amount < 0:
            raise ValueError("counters can only be incremented by non-negative amounts")
        with self._lock:
            self.value += amount


class HistogramSeries:
    """One labelled histogram: a count per bucket (the last is +Inf) and the sum of observations."""

    __slots__ = ("_bounds", "_lock", "counts", "created", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self._bounds = bounds
        self._lock = threading.Lock()
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0
        self.created = time.time()

    def observe(self, value: float) -> None:
        index = bisect_left(self._bounds, value)  # the first bucket whose upper bound is >= value
        with self._lock:
            self.counts[index] += 1
            self.total += value

    def snapshot(self) -> tuple[list[int], float]:
        with self._lock:
            return list(self.counts), self.total


S = TypeVar("S", CounterSeries, HistogramSeries)


class _Tally(Collector, Generic[S]):
    """A named metric with fixed label names, registered on `registry`; series are made on first use."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str], registry: CollectorRegistry) -> None:
        self.name, self.documentation, self.labelnames = name, documentation, tuple(labelnames)
        self._series: dict[tuple[str, ...], S] = {}
        self._lock = threading.Lock()
        registry.register(self)

    def labels(self, *values: str) -> S:
        """The series of these label values (look it up once and keep it: the lookup costs more than a use)."""
        key = tuple(str(v) for v in values)
        found = self._series.get(key)
        if found is None:
            if len(key) != len(self.labelnames):
                raise ValueError(f"{self.name} takes labels {self.labelnames}, got {key}")
            with self._lock:
                found = self._series.setdefault(key, self._new_series())
        return found

    def _new_series(self) -> S:
        raise NotImplementedError

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            items = list(self._series.items())
        yield self._family(items)

    def describe(self) -> Iterator[Metric]:
        yield self._family([])

    def _family(self, items: list[tuple[tuple[str, ...], S]]) -> Metric:
        raise NotImplementedError


class TallyCounter(_Tally[CounterSeries]):
    """A counter (`name` without `_total`, as `prometheus_client.Counter` takes it)."""

    def _new_series(self) -> CounterSeries:
        return CounterSeries()

    def _family(self, items: list[tuple[tuple[str, ...], CounterSeries]]) -> Metric:
        family = CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for values, series in items:
            family.add_metric(values, series.value, created=series.created)
        return family


class TallyHistogram(_Tally[HistogramSeries]):
    """A histogram with fixed bucket bounds (+Inf is added)."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        registry: CollectorRegistry,
        buckets: Sequence[float],
    ) -> None:
        bounds = tuple(float(b) for b in buckets if b != float("inf"))
        if list(bounds) != sorted(set(bounds)) or not bounds:
            raise ValueError("buckets must be increasing and not empty")
        self.bounds = bounds
        self._le = [_go_float(b) for b in bounds] + ["+Inf"]  # the `le` label of each bucket
        super().__init__(name, documentation, labelnames, registry)

    def _new_series(self) -> HistogramSeries:
        return HistogramSeries(self.bounds)

    def _family(self, items: list[tuple[tuple[str, ...], HistogramSeries]]) -> Metric:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for values, series in items:
            counts, total = series.snapshot()
            cumulative, running = [], 0
            for le, count in zip(self._le, counts, strict=True):
                running += count
                cumulative.append((le, running))
            family.add_metric(list(values), cumulative, total)
            family.add_sample(f"{self.name}_created", dict(zip(self.labelnames, values, strict=True)), series.created)
        return family
