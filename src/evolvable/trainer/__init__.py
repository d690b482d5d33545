"""Online RL for policy weights: decoupled-PPO LoRA training on recorded trajectories, on accelerate.

    from evolvable.trainer import RLConfig, StoreSource, run_training_job, manifest_for, publish
    result = run_training_job(RLConfig(output_dir="runs/rl-1"), StoreSource(db_url, {"agent": "support"}))
    register = adapter_registrar(registry)  # evolvable.control.policies: registration is control's job
    publish(result.adapter_dir, manifest_for(result, agent="support"), register=register, servers=[url])

torch, transformers and peft are imported inside the functions that need them.
"""

from evolvable.trainer.config import RLConfig
from evolvable.trainer.loop import TrainingResult, run_training_job
from evolvable.trainer.publish import PublishedAdapter, PublishResult, manifest_for, publish
from evolvable.trainer.samples import DatasetSource, FileSource, StoreSource, TrainingSample, build_training_set

__all__ = [
    "DatasetSource",
    "FileSource",
    "PublishResult",
    "PublishedAdapter",
    "RLConfig",
    "StoreSource",
    "TrainingResult",
    "TrainingSample",
    "build_training_set",
    "manifest_for",
    "publish",
    "run_training_job",
]
