"""Side-by-side views of several evaluations (baseline vs after, or one per lever): a Rich table and a PNG."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from evolvable.workloads.support_desk.evaluate import EvalReport, RateStats

if TYPE_CHECKING:
    from rich.table import Table


def _cell(stats: RateStats | None) -> str:
    if stats is None or stats.n == 0:
        return "–"
    return f"{stats.rate:.0%} [dim]({stats.ci_low:.0%}–{stats.ci_high:.0%})[/]"


def comparison_table(reports: Mapping[str, EvalReport], title: str = "support desk: success (95% CI)") -> Table:
    """One column per report; rows per intent, overall, mean reward and safety pass rate."""
    from rich.table import Table

    table = Table(title=title)
    table.add_column("intent")
    for name in reports:
        table.add_column(name, justify="right")
    intents = sorted({i for r in reports.values() for i in r.per_intent})
    for intent in intents:
        table.add_row(intent, *(_cell(r.per_intent.get(intent)) for r in reports.values()))
    table.add_section()
    table.add_row("[bold]overall[/]", *(_cell(r.overall) for r in reports.values()))
    table.add_row("mean reward", *(f"{r.mean_reward:.2f}" for r in reports.values()))
    table.add_row(
        "safety pass",
        *(f"{r.safety_pass_rate:.0%} [dim]({r.safety_ci[0]:.0%}–{r.safety_ci[1]:.0%})[/]" for r in reports.values()),
    )
    return table


def plot_comparison(reports: Mapping[str, EvalReport], path: str | Path, title: str = "Support desk") -> Path:
    """Grouped bars of success per intent and overall, with Wilson intervals as error bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    intents = [*sorted({i for r in reports.values() for i in r.per_intent}), "overall"]
    x = np.arange(len(intents))
    width = 0.8 / max(1, len(reports))
    fig, ax = plt.subplots(figsize=(max(6.0, 1.2 * len(intents)), 3.8))
    for k, (name, report) in enumerate(reports.items()):
        stats = [report.per_intent.get(i) if i != "overall" else report.overall for i in intents]
        rates = np.array([s.rate if s else 0.0 for s in stats])
        low = np.array([s.rate - s.ci_low if s else 0.0 for s in stats])
        high = np.array([s.ci_high - s.rate if s else 0.0 for s in stats])
        errors = [np.clip(low, 0, None), np.clip(high, 0, None)]
        ax.bar(x + (k - (len(reports) - 1) / 2) * width, rates, width, yerr=errors, capsize=2, label=name)
    ax.set_xticks(x, [i.replace("_", "\n") for i in intents], fontsize=8)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("success rate")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
