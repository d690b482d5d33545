"""The demo's report: tables on the console, and a folder with plots, decisions and trajectories."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from evolvable.control.runtime import ControlPlane
    from evolvable.demo.config import DemoConfig
    from evolvable.store import Store
    from evolvable.workloads.support_desk import EvalReport


def _decisions(plane: ControlPlane, agent: str) -> list[dict[str, Any]]:
    out = []
    for d in reversed(plane.journal.decisions(agent)):
        out.append(
            {
                "id": d.id,
                "lever": d.lever.value,
                "state": d.state.value,
                "verdict": d.verdict.value if d.verdict else None,
                "candidate": d.candidate_version,
                "baseline": d.baseline_version,
                "rationale": d.rationale,
                "predicted": d.predicted,
                "gates": d.gates,
                "evidence": d.evidence,
                "created_at": d.created_at.isoformat(),
            }
        )
    return out


def _gate_line(decision: dict[str, Any]) -> str:
    """The gates' own words (safety, then replay), so the report says why a candidate went on or stopped."""
    gates = decision.get("gates") or {}
    named = [(name, gates.get(name) or {}) for name in ("safety", "replay")]
    reasons = [f"{name} gate: {gate['reason']}" for name, gate in named if "reason" in gate]
    return "".join(f"\n  - {reason}" for reason in reasons)


def _versions(plane: ControlPlane, agent: str) -> list[dict[str, Any]]:
    from evolvable.control.models import VersionKind

    rows = []
    for kind in (VersionKind.harness, VersionKind.policy):
        for v in plane.registry.versions(agent, kind):
            rows.append({"id": v.id, "kind": kind.value, "state": v.state.value, "parent": v.parent_id, "note": v.note})
    return rows


def _short_action(action: str) -> str:
    """'agent: skill (rule): candidate h1-.. stopped by the replay gate: ...' -> 'skill: gated out'."""
    body = action.split(": ", 1)[-1]
    lever = body.split(" ", 1)[0]
    lowered = body.lower()
    for word, label in (("rolled back", "rolled back"), ("promot", "promoted"), ("stopped", "gated out")):
        if word in lowered:
            return f"{lever}: {label}"
    return f"{lever}: canary" if "canary" in lowered else f"{lever}: {lowered[len(lever) :][:24].strip()}"


def _plot_rounds(rounds: list[dict[str, Any]], baseline: float, after: float, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.6))
    xs = [r["round"] for r in rounds]
    ax.plot(xs, [r["success_rate"] for r in rounds], marker="o", label="live traffic (through the proxy)")
    ax.axhline(baseline, color="grey", linestyle="--", label=f"report set, baseline {baseline:.0%}")
    ax.axhline(after, color="green", linestyle="--", label=f"report set, after {after:.0%}")
    for r in rounds:
        if r["actions"]:
            ax.annotate(
                "\n".join(_short_action(a) for a in r["actions"][:3]),
                (r["round"], r["success_rate"]),
                textcoords="offset points",
                xytext=(4, 6),
                fontsize=7,
            )
    ax.set_xlabel("round")
    ax.set_ylabel("success rate")
    ax.set_ylim(0, 1.05)
    ax.set_xticks(xs)
    ax.set_title("Support desk on SmolLM2-135M: live success per round")
    ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _lever_comparison(path: Path | None) -> list[str]:
    """The evolution benchmark's arms (static, single levers, automatic), when its results are at hand:
    the demo runs one arm; this is how the levers compare on the same workload."""
    if path is None or not path.is_file():
        return []
    try:
        data = json.loads(path.read_text())
        rows = [
            f"| {a['arm']} | {a['holdout_success']:.0%} ({a['holdout_ci'][0]:.0%}-{a['holdout_ci'][1]:.0%}) "
            f"n={a['holdout_n']} | {a['safety_pass']:.0%} | "
            + "; ".join(f"{d['lever']}: {d['state']}" for d in a["decisions"])
            + " |"
            for a in data["arms"]
        ]
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return ["", f"(lever comparison at {path.name} is unreadable)"]
    return [
        "",
        f"## Lever comparison ({path.name}, benchmarks/evolution.py)",
        "",
        "| arm | holdout success (95% CI) | safety | decisions |",
        "|---|---|---|---|",
        *rows,
    ]


def _dashboard_section(report_dir: Path) -> list[str]:
    """How to browse this run's trajectories, decisions and learning curves in the dashboard."""
    db = (report_dir / "evolvable.db").resolve()
    return [
        "",
        "## Browse it in the dashboard",
        "",
        "Every trajectory, signal, version and decision of this run is in `evolvable.db`. Serve it and open",
        "[the dashboard](http://127.0.0.1:8400/ui/) (Trajectories, Feedback, Control plane, Learning, Governance;",
        "docs/dashboard.md). With no key configured, any key logs in as the tenant `default` the demo recorded:",
        "",
        "```bash",
        f"evolvable serve --db sqlite:///{db} --upstream http://127.0.0.1:8000/v1 --control-interval 0",
        "```",
    ]


def write_report(
    cfg: DemoConfig,
    *,
    store: Store,
    plane: ControlPlane,
    baseline: tuple[EvalReport, EvalReport],
    after: tuple[EvalReport, EvalReport],
    rounds: list[dict[str, Any]],
    wall_s: float,
    console: Console,
) -> dict[str, Any]:
    from evolvable.store import TrajectoryFilter
    from evolvable.workloads.support_desk import AGENT_NAME, comparison_table, plot_comparison

    out = cfg.report_dir
    (base_hold, base_safe), (after_hold, after_safe) = baseline, after
    console.print(comparison_table({"baseline": base_hold, "after": after_hold}, title="report set: success (95% CI)"))
    safety = Table(title="safety probes (must never regress)")
    safety.add_column("")
    safety.add_column("baseline", justify="right")
    safety.add_column("after", justify="right")
    safety.add_row("probe pass rate", f"{base_safe.safety_pass_rate:.0%}", f"{after_safe.safety_pass_rate:.0%}")
    console.print(safety)

    decisions = _decisions(plane, AGENT_NAME)
    table = Table(title="control-plane decisions")
    for col in ("lever", "state", "verdict", "rationale"):
        table.add_column(col, overflow="fold")
    for d in decisions:
        table.add_row(d["lever"], d["state"], d["verdict"] or "-", d["rationale"][:160])
    console.print(table)

    plots = [
        plot_comparison({"baseline": base_hold, "after": after_hold}, out / "success_by_intent.png"),
        _plot_rounds(rounds, base_hold.success_rate, after_hold.success_rate, out / "live_rounds.png"),
    ]
    exported = 0
    with (out / "trajectories.jsonl").open("w") as fh:
        for t in store.iter_trajectories(TrajectoryFilter(agent=AGENT_NAME)):
            fh.write(t.model_dump_json() + "\n")
            exported += 1
    versions = _versions(plane, AGENT_NAME)
    summary: dict[str, Any] = {
        "model": cfg.model,
        "quick": cfg.quick,
        "levers": sorted(lv.value for lv in cfg.levers),
        "wall_s": round(wall_s, 1),
        "baseline": {
            "report_set": base_hold.model_dump(exclude={"episodes"}),
            "safety_pass_rate": base_safe.safety_pass_rate,
        },
        "after": {
            "report_set": after_hold.model_dump(exclude={"episodes"}),
            "safety_pass_rate": after_safe.safety_pass_rate,
        },
        "rounds": rounds,
        "decisions": decisions,
        "versions": versions,
        "trajectories_exported": exported,
        "plots": [p.name for p in plots],
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    (out / "decisions.json").write_text(json.dumps(decisions, indent=2, default=str))
    lines = [
        "# Evolvable demo report",
        "",
        f"Model `{cfg.model}`, levers {', '.join(summary['levers'])}, {len(rounds)} live rounds, "
        f"{wall_s / 60:.1f} min.",
        "",
        f"- report set success: {base_hold.success_rate:.0%} -> {after_hold.success_rate:.0%}",
        f"- safety probe pass rate: {base_safe.safety_pass_rate:.0%} -> {after_safe.safety_pass_rate:.0%}",
        f"- decisions: {len(decisions)}; versions: {len(versions)}; trajectories exported: {exported}",
        "",
        "![success by intent](success_by_intent.png)",
        "",
        "![live rounds](live_rounds.png)",
        "",
        "## Decisions",
        "",
        *[
            f"- **{d['lever']}** ({d['state']}, verdict {d['verdict'] or '-'}): {d['rationale']}{_gate_line(d)}"
            for d in decisions
        ],
        "",
        "## Versions",
        "",
        "Harness and policy versions the run created (a policy version is a LoRA adapter trained by the",
        "weights lever from the recorded traffic, hot-loaded into the policy server).",
        "",
        "| kind | version | state | parent | note |",
        "|---|---|---|---|---|",
        *[f"| {v['kind']} | `{v['id']}` | {v['state']} | {v['parent'] or '-'} | {v['note'] or ''} |" for v in versions],
        "",
        "Files: `summary.json`, `decisions.json`, `trajectories.jsonl` (ATDP), `evolvable.db` (the store).",
        *_lever_comparison(Path(cfg.lever_comparison) if cfg.lever_comparison else None),
        *_dashboard_section(out),
    ]
    (out / "report.md").write_text("\n".join(lines) + "\n")
    console.print(
        f"[bold]report set[/] {base_hold.success_rate:.0%} -> {after_hold.success_rate:.0%}; "
        f"safety {base_safe.safety_pass_rate:.0%} -> {after_safe.safety_pass_rate:.0%}; report in {out}"
    )
    return summary
