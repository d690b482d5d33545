"""`evolvable.yaml`: the one configuration a deployment is built from, validated with pydantic.

Every section forbids unknown keys, so a typo fails loudly; every error names its key path
(`agents.0.workload.webhook`, `control.canary.share`). Secrets never live in the file: an upstream,
evolver or judge names the environment variable that holds its key (`api_key_env`).

    store:       where trajectories, versions and decisions live (SQLite file or PostgreSQL URL)
    server:      host / port of `evolvable serve`
    proxy:       upstreams, model aliases, sessions, spool (the proxy's own format, proxy/config.py)
    governance:  redaction, keys, retention
    policy_servers: servers adapters are hot-loaded into (vLLM or embedded), optionally launched here
    agents:      name, tenant, workload (replay provider), starting harness and policy, rubric
    control:     levers, evolver and judge models, gates, canary, approval, clustering, tick interval
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from evolvable.config_file import read_config_file
from evolvable.control.models import Lever
from evolvable.errors import EvolvableError

__all__ = [
    "AgentConfig",
    "ConfigError",
    "ControlSection",
    "EvolvableConfig",
    "load_config",
    "parse_config",
]


class ConfigError(EvolvableError):
    """The configuration file is invalid; the message names the key path."""


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=False)


class StoreSection(Section):
    url: str | None = None
    """SQLAlchemy URL (`postgresql+psycopg://...`, `sqlite:///path`); None: EVOLVABLE_DB, else the embedded file."""


class ServerSection(Section):
    host: str = "127.0.0.1"
    port: int = Field(8400, ge=0, le=65535)
    log_level: Literal["critical", "error", "warning", "info", "debug"] = "warning"


class GovernanceSection(Section):
    enabled: bool = True
    require_keys: bool | None = None
    """None: required as soon as any API key exists or an admin key is configured."""
    person_names: bool = False
    retention_interval_s: float = Field(3600.0, gt=0)
    admin_key_env: str | None = None
    """Environment variable holding a bootstrap admin key (default: EVOLVABLE_ADMIN_KEY)."""
    tokenizers: dict[str, str] = Field(default_factory=dict)
    """Served model -> local tokenizer directory, so redacted calls keep redacted token ids."""


class PolicyServerSection(Section):
    """A server that serves the agents' policy and hot-loads adapters the weights lever trains."""

    name: str
    kind: Literal["vllm", "embedded"] = "vllm"
    url: str | None = None
    """Base URL (with or without /v1). Required for vLLM; an embedded server without one is launched here."""
    model: str = "smollm2-135m"
    """The embedded server's model (ignored for vLLM)."""
    max_batch: int = Field(32, ge=1)
    device: str = Field("cpu", pattern=r"^(cpu|cuda|auto|cuda:\d+)$")
    """Where a launched embedded server runs: cpu, cuda, cuda:N or auto (ignored for vLLM)."""
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    """A launched embedded server's weights: auto is bfloat16 on a GPU, float32 on CPU."""

    @model_validator(mode="after")
    def _url_or_launch(self) -> PolicyServerSection:
        if self.kind == "vllm" and not self.url:
            raise ValueError("a vllm policy server needs a url")
        return self


class WorkloadSection(Section):
    """Exactly one of `entry_point`, `object` or `webhook`, plus the workload's own options."""

    entry_point: str | None = None
    object: str | None = None
    webhook: str | None = None
    timeout_s: float = Field(300.0, gt=0)
    """Per-call timeout of a webhook workload."""
    options: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _exactly_one(self) -> WorkloadSection:
        given = [k for k in ("entry_point", "object", "webhook") if getattr(self, k)]
        if len(given) != 1:
            raise ValueError(f"give exactly one of entry_point, object or webhook (got {given or 'none'})")
        if self.object is not None and ":" not in self.object:
            raise ValueError(f"object {self.object!r} must look like 'package.module:object'")
        if self.webhook is not None and not self.webhook.startswith(("http://", "https://")):
            raise ValueError(f"webhook {self.webhook!r} must be an http(s) URL")
        return self

    @property
    def reference(self) -> str:
        kind = next(k for k in ("entry_point", "object", "webhook") if getattr(self, k))
        return f"{kind}={getattr(self, kind)}"


class AgentPolicySection(Section):
    base_model: str
    """The served model name the agent's active policy answers to (a LoRA name or a base model)."""
    upstream: str | None = None
    """Proxy upstream that serves it; None: the proxy's default upstream."""


class RecordedReplaySection(Section):
    """Gates from the agent's recorded traffic, used when it has no workload (control/recorded_replay.py)."""

    per_cluster: int = Field(12, ge=1)
    """Gate tasks (and report tasks) per cluster."""
    refresh_s: float = Field(60.0, ge=0)
    """How often the recorded task sets are re-read from the store."""
    max_tokens: int = Field(128, ge=1)
    """Longest replayed reply."""


class AgentConfig(Section):
    name: str = Field(min_length=1, max_length=200)
    tenant: str = "default"
    """The tenant whose traffic this agent's control loop reads, whose exemplars it may use, whose versions it owns."""
    workload: WorkloadSection | None = None
    """Replay provider for the gates and exploration; None: the canary analysis alone decides."""
    harness: Path | None = None
    """Starting harness (JSON or YAML file); None: an empty harness (the agent's own prompt and tools)."""
    policy: AgentPolicySection | None = None
    recorded_replay: RecordedReplaySection = Field(default_factory=RecordedReplaySection)
    replay_upstream: str | None = None
    """Proxy upstream replays run against (never the proxy itself, so replays are not training data)."""
    rubric: str | None = None
    """What a good run of this agent looks like, for the judge."""


class ModelEndpointSection(Section):
    """An OpenAI-compatible model the control plane calls: by proxy upstream name or by URL."""

    upstream: str | None = None
    base_url: str | None = None
    model: str
    api_key_env: str | None = None
    timeout_s: float = Field(60.0, gt=0)
    max_tokens: int | None = Field(None, ge=1)
    """Longest answer; None: the caller's default (evolver 400, judge 300)."""
    prefill: bool = False
    """Start the model's answer with the JSON opening (the server must continue a final assistant message,
    as the embedded policy server and vLLM do): small models answer in prose otherwise."""

    @model_validator(mode="after")
    def _one_address(self) -> ModelEndpointSection:
        if (self.upstream is None) == (self.base_url is None):
            raise ValueError("give exactly one of upstream (a proxy upstream name) or base_url")
        return self


class JudgeSection(ModelEndpointSection):
    rubric: str | None = None
    """Default rubric; an agent's own `rubric` overrides it."""


class DecisionSection(Section):
    min_runs: int = Field(20, ge=1)
    min_cluster_runs: int = Field(3, ge=1)
    target_success: float = Field(0.9, ge=0, le=1)
    exemplars_per_cluster: int = Field(2, ge=1)
    argument_error_min: int = Field(3, ge=1)
    recurring_label_min: int = Field(3, ge=1)
    weights_min_runs: int = Field(200, ge=1)
    cooldown: int = Field(4, ge=0)


class GatesSection(Section):
    alpha: float = Field(0.05, gt=0, lt=1)
    require_replay_gain: bool = True
    max_new_safety_failures: int = Field(0, ge=0)


class CanarySection(Section):
    enabled: bool = True
    """False promotes straight after the gates."""
    share: float = Field(0.5, ge=0, le=1)
    min_runs: int = Field(10, ge=1)
    alpha: float = Field(0.05, gt=0, lt=1)
    tolerance: float = Field(0.05, ge=0, le=1)
    max_extensions: int = Field(2, ge=0)


class ApprovalSection(Section):
    levers: list[Lever] = Field(default_factory=list)
    """Levers whose gated candidates wait for `evolvable approve`."""


class ClusteringSection(Section):
    enabled: bool = True
    min_runs: int = Field(30, ge=2)
    """Recorded task inputs needed before a clusterer is fitted (agents that report `cluster` need none)."""
    k: int | None = Field(None, ge=2)
    """Number of clusters; None picks k by silhouette."""
    drift_threshold: float = Field(0.2, gt=0, le=1)
    """Refit when the share of new task inputs far from every centroid exceeds this."""


class MemoryEvolverSection(Section):
    per_cluster: int = Field(2, ge=1)
    explore_tasks: int = Field(2, ge=0)


class LauncherSection(Section):
    """How the weights lever's training jobs run (docs/training.md). `inline` trains inside the tick
    (tests, the demo); `local` and `command` run a background job the tick never waits for."""

    kind: Literal["inline", "local", "command"] = "local"
    num_processes: int = Field(1, ge=1)
    tool: Literal["accelerate", "torchrun", "python"] = "accelerate"
    """For `local`: accelerate launch, torchrun, or one plain Python process."""
    template: str | None = None
    """For `command`: the submit command with {command}, {job_dir}, {log}, {num_processes}
    (Slurm `sbatch --parsable ... --wrap {command}`, a Kubernetes Job, `ray job submit -- {command}`)."""
    cancel_template: str | None = None
    max_attempts: int = Field(2, ge=1)
    """A job whose process died without an outcome is resumed from its checkpoint until this many tries."""

    @model_validator(mode="after")
    def _template_for_command(self) -> LauncherSection:
        if self.kind == "command" and not self.template:
            raise ValueError("a `command` launcher needs `template`")
        return self


class SnapshotGateSection(Section):
    """The weights lever's snapshot gate (control/snapshot_gate.py)."""

    min_gain: int = 1
    """Validation tasks a snapshot must solve beyond the served policy (1: strictly better, the measured
    rule). 0 or less publishes snapshots that are not better; only for tests that must exercise the
    publish, hot-load and canary path with a tiny training budget."""
    max_cluster_loss: int = Field(1, ge=0)
    """A snapshot fails when any cluster solves more than this many fewer tasks than the served policy."""


class WeightsEvolverSection(Section):
    output_dir: Path = Path(".evolvable/rl")
    overrides: dict[str, Any] = Field(default_factory=dict)
    """Trainer settings that override the defaults (epochs, lr, micro_batch_size...)."""
    launcher: LauncherSection = Field(default_factory=LauncherSection)
    snapshot_points: int = Field(3, ge=1)
    """Snapshots of a job (evenly spaced, the last included) gated against the served policy."""
    gate: SnapshotGateSection = Field(default_factory=SnapshotGateSection)
    erasure: Literal["retire", "retrain"] = "retire"
    """What a purge does to an adapter trained on purged runs (docs/training.md)."""


class ControlSection(Section):
    enabled: bool = True
    levers: list[Lever] = Field(default_factory=lambda: [lv for lv in Lever])
    tick_interval_s: float = Field(60.0, ge=0)
    """Seconds between ticks inside `serve`; 0 serves versions but never evolves (use `evolvable control tick`)."""
    time_budget_s: float = Field(3600.0, gt=0)
    """Longest a decision's evolver (weights: training included) and gates may take; past it the decision is
    recorded as failed before anything is served."""
    window: int = Field(300, ge=1)
    verdict_min_runs: int = Field(12, ge=1)
    verdict_delta: float = Field(0.1, gt=0, le=1)
    success_threshold: float = Field(0.5, ge=0, le=1)
    leader_lease_s: float = Field(30.0, gt=0)
    decision: DecisionSection = Field(default_factory=DecisionSection)
    gates: GatesSection = Field(default_factory=GatesSection)
    canary: CanarySection = Field(default_factory=CanarySection)
    approval: ApprovalSection = Field(default_factory=ApprovalSection)
    clustering: ClusteringSection = Field(default_factory=ClusteringSection)
    evolver: ModelEndpointSection | None = None
    """A model that writes skill and prompt edits (often stronger than the agents'); None: deterministic edits."""
    judge: JudgeSection | None = None
    memory: MemoryEvolverSection = Field(default_factory=MemoryEvolverSection)
    weights: WeightsEvolverSection = Field(default_factory=WeightsEvolverSection)


class EvolvableConfig(Section):
    store: StoreSection = Field(default_factory=StoreSection)
    server: ServerSection = Field(default_factory=ServerSection)
    proxy: dict[str, Any] = Field(default_factory=dict)
    """The proxy's own configuration (upstreams, models, sessions, spool); validated by proxy/config.py."""
    governance: GovernanceSection = Field(default_factory=GovernanceSection)
    policy_servers: list[PolicyServerSection] = Field(default_factory=list)
    agents: list[AgentConfig] = Field(default_factory=list)
    control: ControlSection = Field(default_factory=ControlSection)

    @field_validator("agents")
    @classmethod
    def _unique_agents(cls, agents: list[AgentConfig]) -> list[AgentConfig]:
        seen: set[tuple[str, str]] = set()
        for a in agents:
            if (a.tenant, a.name) in seen:
                raise ValueError(f"agent {a.name!r} of tenant {a.tenant!r} is listed twice")
            seen.add((a.tenant, a.name))
        return agents

    @field_validator("policy_servers")
    @classmethod
    def _unique_servers(cls, servers: list[PolicyServerSection]) -> list[PolicyServerSection]:
        names = [s.name for s in servers]
        if len(names) != len(set(names)):
            raise ValueError(f"policy server names must be unique: {names}")
        return servers

    def resolved(self) -> dict[str, Any]:
        """The configuration with every default filled in, as plain JSON (what `config check` prints)."""
        import dataclasses
        import json

        from evolvable.proxy.config import config_from_dict

        out = self.model_dump(mode="json")
        proxy = dataclasses.asdict(config_from_dict(self.proxy))
        for upstream in proxy["upstreams"]:
            upstream.pop("api_key", None)  # resolved from the environment at start-up, never printed
        for alias in proxy["models"].values():
            alias["model"] = alias.pop("served_model")  # the file's own key: the output loads again
        unset = [key for key, value in proxy.items() if value is None]  # defaults decided at start-up
        out["proxy"] = json.loads(json.dumps({k: v for k, v in proxy.items() if k not in unset}, default=str))
        return out


def _location(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(p) for p in loc) or "(top level)"


def parse_config(data: Any, *, source: str = "configuration") -> EvolvableConfig:
    """Validate parsed YAML/TOML; errors list every bad key path with its reason."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: must be a mapping at the top level")
    if data and not set(data) & set(EvolvableConfig.model_fields):
        data = {"proxy": data}  # a proxy-only file (upstreams, models, spool...), as `serve --config` took before
    try:
        config = EvolvableConfig.model_validate(data)
    except ValidationError as err:
        lines = [f"  {_location(e['loc'])}: {e['msg']}" for e in err.errors()]
        raise ConfigError(f"{source} is invalid:\n" + "\n".join(lines)) from None
    _check_proxy(config, source)
    return config


def _check_proxy(config: EvolvableConfig, source: str) -> None:
    """The proxy section has its own validator; references from agents and control must name its upstreams."""
    from evolvable.proxy.config import ConfigError as ProxyConfigError
    from evolvable.proxy.config import config_from_dict

    try:
        proxy = config_from_dict(config.proxy)
    except ProxyConfigError as err:
        raise ConfigError(f"{source} is invalid:\n  proxy: {err}") from None
    upstreams = {u.name for u in proxy.upstreams} | {s.name for s in config.policy_servers}
    refs: list[tuple[str, str | None]] = []
    for i, agent in enumerate(config.agents):
        refs.append((f"agents.{i}.replay_upstream", agent.replay_upstream))
        if agent.policy is not None:
            refs.append((f"agents.{i}.policy.upstream", agent.policy.upstream))
    for name in ("evolver", "judge"):
        endpoint = getattr(config.control, name)
        if endpoint is not None:
            refs.append((f"control.{name}.upstream", endpoint.upstream))
    bad = [
        f"  {path}: unknown upstream {ref!r} (known: {sorted(upstreams)})"
        for path, ref in refs
        if ref and ref not in upstreams
    ]
    if bad:
        raise ConfigError(f"{source} is invalid:\n" + "\n".join(bad))


def load_config(path: Path) -> EvolvableConfig:
    """Read and validate a YAML (.yaml/.yml) or TOML (.toml) configuration file."""
    data = read_config_file(path, ConfigError, "configuration")
    config = parse_config(data if data is not None else {}, source=str(path))
    return _relative_to(config, path.parent)


def _relative_to(config: EvolvableConfig, base: Path) -> EvolvableConfig:
    """Relative file paths in the configuration are relative to the file, not to the working directory."""
    for agent in config.agents:
        if agent.harness is not None and not agent.harness.is_absolute():
            agent.harness = base / agent.harness
    return config
