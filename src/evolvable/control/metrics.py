"""The control plane's Prometheus series, read from its journal at scrape time (correct across replicas:
the journal is shared, the leader's process memory is not)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from evolvable.control.journal import Journal
from evolvable.control.models import RolloutState

_OPEN_ROLLOUTS = [RolloutState.running, RolloutState.paused]


class ControlCollector(Collector):
    """Decisions by lever, state and verdict; canaries by agent with their traffic share and analyses."""

    def __init__(self, journal: Journal, decision_window: int = 10_000) -> None:
        self.journal = journal
        """Every tenant's journal (`Journal(engine, tenant=None)`): one scrape covers the deployment."""
        self.decision_window = decision_window

    def collect(self) -> Iterator[Any]:
        decisions = Counter(
            (d.agent, d.lever.value, d.state.value, d.verdict.value if d.verdict else "none")
            for d in self.journal.decisions(None, None, self.decision_window)
        )
        family = CounterMetricFamily(
            "evolvable_control_decisions",
            "Control-plane decisions on record, by agent, lever, state and measured verdict.",
            labels=["agent", "lever", "state", "verdict"],
        )
        for labels, n in sorted(decisions.items()):
            family.add_metric(list(labels), n)
        yield family
        share = GaugeMetricFamily(
            "evolvable_control_canary_share",
            "Traffic share of each running or paused canary (0 when none).",
            labels=["agent", "kind", "rollout", "state"],
        )
        analyses = GaugeMetricFamily(
            "evolvable_control_canary_analyses",
            "Analyses run so far on each open canary, by their last result.",
            labels=["agent", "rollout", "result"],
        )
        for rollout in self.journal.rollouts(None, _OPEN_ROLLOUTS):
            share.add_metric([rollout.agent, rollout.kind.value, rollout.id, rollout.state.value], rollout.share)
            last = str(rollout.analyses[-1].get("result", "none")) if rollout.analyses else "none"
            analyses.add_metric([rollout.agent, rollout.id, last], len(rollout.analyses))
        yield share
        yield analyses
