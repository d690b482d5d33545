"""The policy server's Prometheus series: engine counters and queue state read at scrape time, plus the
decode batch-size histogram the engine observes itself (`telemetry.metrics.DECODE_BATCH_SIZE`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from evolvable.telemetry.metrics import TokenRate

if TYPE_CHECKING:
    from evolvable.policy_server.engine import Engine

_COUNTERS = {
    "requests_submitted": "Generation requests accepted by the engine.",
    "requests_finished": "Generation requests finished (completed, cancelled or failed).",
    "requests_cancelled": "Requests whose caller went away before they finished.",
    "prefill_tokens": "Prompt tokens computed in prefills (cached prefix tokens excluded).",
    "decode_steps": "Decode steps run (each advances every sequence in the batch).",
    "generated_tokens": "Tokens generated.",
    "prefix_cache_hits": "Prefills that started from a cached prompt prefix.",
    "prefix_cached_tokens": "Prompt tokens a prefix-cache hit did not have to compute.",
}


class EngineCollector(Collector):
    """Queue depth, running batch, throughput and prefix-cache use of one engine."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.rate = TokenRate()

    def collect(self) -> Iterator[Metric]:
        stats = self.engine.stats
        yield GaugeMetricFamily(
            "evolvable_policy_queue_depth", "Requests waiting to join the running batch.", self.engine.queue_depth
        )
        yield GaugeMetricFamily(
            "evolvable_policy_batch_size", "Sequences in the running batch now.", self.engine.batch_size
        )
        yield GaugeMetricFamily(
            "evolvable_policy_tokens_per_second",
            "Generated tokens per second since the previous scrape.",
            self.rate.update(stats.generated_tokens),
        )
        for name, help_text in _COUNTERS.items():
            yield CounterMetricFamily(f"evolvable_policy_{name}", help_text, getattr(stats, name))
