"""`evolvable train`: run an online-RL job by hand (the control plane runs the same job API)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from evolvable.errors import TrainingError

if TYPE_CHECKING:
    from evolvable.control.registry import Registry
    from evolvable.store import TrajectoryFilter
    from evolvable.trainer.samples import DatasetSource, SamplesSource


def train(
    dataset: str | None = typer.Option(None, "--dataset", help="Train on a dataset snapshot (NAME or NAME@VERSION)."),
    since: str | None = typer.Option(
        None, "--since", help="Train on trajectories recorded since this policy version was registered."
    ),
    from_file: Path | None = typer.Option(None, "--from-file", help="Train on an ATDP trajectories JSONL file."),
    config_file: Path | None = typer.Option(None, "--config", help="RLConfig as YAML or TOML."),
    db: str | None = typer.Option(None, "--db", help="Store URL (default: EVOLVABLE_DB, else the embedded SQLite)."),
    agent: str | None = typer.Option(None, "--agent", help="Only this agent's trajectories (with --since)."),
    output_dir: Path | None = typer.Option(None, "--output-dir", help="Job directory (overrides the config)."),
    resume: Path | None = typer.Option(None, "--resume", help="Continue the job in this directory."),
    publish_adapter: bool = typer.Option(
        False, "--publish", help="Register the adapter as a candidate policy version in the store's registry."
    ),
    server: list[str] = typer.Option([], "--server", help="Hot-load the adapter into this vLLM-compatible server."),
    metrics_port: int | None = typer.Option(
        None, "--metrics-port", help="Serve Prometheus metrics (loss, reward, KL, tokens/s) while training."
    ),
) -> None:
    """Train a LoRA adapter with decoupled PPO on recorded trajectories."""
    from rich.console import Console
    from rich.table import Table

    from evolvable.trainer.config import RLConfig
    from evolvable.trainer.loop import run_training_job
    from evolvable.trainer.samples import FileSource, StoreSource

    chosen = [x for x in (dataset, since, from_file, resume) if x is not None]
    if len(chosen) != 1:
        raise TrainingError("give exactly one of --dataset, --since, --from-file or --resume")
    overrides = {"output_dir": str(output_dir)} if output_dir else {}
    config = RLConfig.from_file(config_file, **overrides) if config_file else RLConfig.from_dict(overrides)
    source: SamplesSource | None = None
    if dataset:
        source = _dataset_source(dataset, db)
    elif from_file:
        source = FileSource(str(from_file))
    elif since:
        source = StoreSource(db, _since_filter(db, since, agent))
    if metrics_port is not None:
        from evolvable.telemetry.metrics import serve_trainer_metrics

        serve_trainer_metrics(metrics_port)
    result = run_training_job(config, source, resume=str(resume) if resume else False)

    console = Console()
    table = Table(title="training job", show_header=False)
    stats = result.sample_stats
    table.add_row("output", result.output_dir)
    table.add_row("trajectories used / seen", f"{stats.get('trajectories_used')} / {stats.get('trajectories_seen')}")
    table.add_row("samples (generated tokens)", f"{stats.get('samples')} ({stats.get('generated_tokens')})")
    table.add_row("excluded", json.dumps(stats.get("excluded", {})))
    for key, value in result.metrics.items():
        table.add_row(key, f"{value:.4g}")
    console.print(table)
    if result.adapter_dir is None:
        raise TrainingError("no usable samples: nothing was trained (see 'excluded' above)")
    if publish_adapter or server:
        from evolvable.control.policies import adapter_registrar
        from evolvable.trainer.publish import manifest_for, publish

        register = adapter_registrar(_registry(db)) if publish_adapter else None
        published = publish(
            result.adapter_dir, manifest_for(result, agent=agent or "default"), register=register, servers=server
        )
        console.print(f"published {published.manifest.lora_name}: policy version {published.policy_version or '-'}")


def _dataset_source(name: str, db: str | None) -> DatasetSource:
    """The named governance dataset snapshot, resolved here so the trainer never opens governance."""
    from evolvable.governance.datasets import DatasetCatalog
    from evolvable.store import Store
    from evolvable.trainer.samples import DatasetSource

    catalog = DatasetCatalog(Store.open(db))
    info = catalog.get(name)
    return DatasetSource(
        name=info.name,
        version=info.version,
        dataset_id=info.id,
        content_hash=info.content_hash,
        load=lambda: catalog.iter_items(info.id),
    )


def _since_filter(db: str | None, version: str, agent: str | None) -> TrajectoryFilter:
    from evolvable.errors import NotFound
    from evolvable.store import TrajectoryFilter

    try:
        record = _registry(db).get(version)
    except NotFound:
        raise TrainingError(f"policy version {version!r} is not in the registry") from None
    return TrajectoryFilter(agent=agent or record.agent, started_after=record.created_at)


def _registry(db: str | None) -> Registry:
    from evolvable.control.registry import Registry
    from evolvable.store import Store

    return Registry(Store.open(db).engine)


def register(app: typer.Typer) -> None:
    app.command("train")(train)
