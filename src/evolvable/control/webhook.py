"""Replay by webhook: the agent team's own service runs gate tasks, so agents in any language can be gated.

The control plane POSTs JSON to one URL; the `action` field says what it wants (protocol
`evolvable.replay/1`, documented in docs/control_plane.md):

- `{"action": "tasks", "agent": ...}` -> `{"holdout": [task...], "safety": [task...]}`, each task
  `{"id": str, "cluster": str, "input": any}` (skipped when the configuration lists the tasks itself);
- `{"action": "run", "split", "tasks", "harness_version", "harness", "policy", "model", "proxy"}` ->
  `{"outcomes": [{"task_id", "success", "reward", "violation", "detail"}]}`, one per task, same order.
  The service runs each task through `proxy.base_url`, opening its session with
  `proxy.session_metadata`, which pins the candidate's harness version and marks the run as a replay
  (replays never count as live traffic).

Anything else (an error status, a timeout, invalid JSON, a missing or extra outcome) raises
`ReplayFailed`, which stops the candidate and lands verbatim in its decision record.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from evolvable.control.gates import ReplayFailed, ReplaySuite, TaskOutcome
from evolvable.control.models import REPLAY_METADATA_KEY, PolicySpec
from evolvable.control.workloads import WorkloadContext
from evolvable.protocol.harness import Harness

PROTOCOL = "evolvable.replay/1"


class _Task(BaseModel):
    model_config = ConfigDict(extra="ignore")
    id: str = Field(min_length=1)
    cluster: str = "all"
    input: Any = None


class _Tasks(BaseModel):
    model_config = ConfigDict(extra="ignore")
    holdout: list[_Task] = Field(min_length=1)
    safety: list[_Task] = Field(default_factory=list)


class _Outcome(BaseModel):
    model_config = ConfigDict(extra="ignore")
    task_id: str
    success: bool
    reward: float = 0.0
    violation: bool = False
    detail: str = ""


class _Outcomes(BaseModel):
    model_config = ConfigDict(extra="ignore")
    outcomes: list[_Outcome]


@dataclass(frozen=True)
class WebhookTask:
    """A gate task as the agent's service defined it; `split` tells the service which set it belongs to."""

    id: str
    cluster: str
    input: Any
    split: str


def _reasons(err: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in err.errors()[:3])


class WebhookClient:
    """One POST per request, every failure translated into `ReplayFailed` with a readable reason."""

    def __init__(self, url: str, timeout_s: float, headers: Mapping[str, str] | None = None) -> None:
        self.url = url
        self.timeout_s = timeout_s
        self.headers = dict(headers or {})

    def post(self, payload: dict[str, Any], schema: type[BaseModel]) -> Any:
        try:
            response = httpx.post(self.url, json=payload, timeout=self.timeout_s, headers=self.headers)
        except httpx.TimeoutException:
            raise ReplayFailed(f"webhook {self.url} timed out after {self.timeout_s:g}s") from None
        except httpx.HTTPError as err:
            raise ReplayFailed(f"webhook {self.url} unreachable: {type(err).__name__}: {err}") from None
        if response.status_code >= 300:
            raise ReplayFailed(f"webhook {self.url} answered HTTP {response.status_code}: {response.text[:200]}")
        try:
            return schema.model_validate_json(response.content)
        except ValidationError as err:
            raise ReplayFailed(f"webhook {self.url} answered garbage: {_reasons(err)}") from None


class WebhookRunner:
    """The gates' `ReplayRunner`, backed by the agent team's service."""

    def __init__(self, client: WebhookClient, context: WorkloadContext, proxy_base_url: str) -> None:
        self.client = client
        self.context = context
        self.proxy_base_url = proxy_base_url

    def run(self, harness: Harness, policy: PolicySpec | None, tasks: Sequence[Any]) -> list[TaskOutcome]:
        version = harness.content_hash()
        split = tasks[0].split if tasks and isinstance(tasks[0], WebhookTask) else "holdout"
        payload = {
            "protocol": PROTOCOL,
            "action": "run",
            "agent": harness.agent,
            "split": split,
            "tasks": [{"id": t.id, "cluster": t.cluster, "input": t.input} for t in tasks],
            "harness_version": version,
            "harness": harness.model_dump(mode="json"),
            "policy": policy.model_dump(mode="json") if policy else None,
            "model": policy.served_model if policy else self.context.model,
            "proxy": {
                "base_url": self.proxy_base_url,
                "agent": harness.agent,
                "session_metadata": {REPLAY_METADATA_KEY: {"harness_version": version}},
            },
        }
        answer: _Outcomes = self.client.post(payload, _Outcomes)
        by_id = {o.task_id: o for o in answer.outcomes}
        extra = set(by_id) - {t.id for t in tasks}
        if extra:
            raise ReplayFailed(f"webhook {self.client.url} answered unknown task(s) {', '.join(sorted(extra)[:5])}")
        missing = [t.id for t in tasks if t.id not in by_id]
        if missing or len(by_id) != len(answer.outcomes):
            raise ReplayFailed(
                f"webhook {self.client.url} answered {len(answer.outcomes)} outcome(s) for {len(tasks)} task(s)"
                + (f"; missing {', '.join(missing[:5])}" if missing else "; duplicate task ids")
            )
        return [
            TaskOutcome(
                task_id=t.id,
                cluster=t.cluster,
                success=by_id[t.id].success,
                reward=by_id[t.id].reward,
                violation=by_id[t.id].violation,
                detail=by_id[t.id].detail[:500],
            )
            for t in tasks
        ]


class WebhookSuite(ReplaySuite):
    """A `ReplaySuite` whose tasks the service supplies on first use (so `serve` starts while it is down)."""

    def __init__(self, runner: WebhookRunner, agent: str, tasks: _Tasks | None) -> None:
        self.runner = runner
        self.client = runner.client
        self.agent = agent
        self._tasks = tasks

    def _load(self) -> _Tasks:
        if self._tasks is None:
            payload = {"protocol": PROTOCOL, "action": "tasks", "agent": self.agent}
            self._tasks = self.client.post(payload, _Tasks)
        return self._tasks

    @property
    def holdout(self) -> list[WebhookTask]:  # type: ignore[override]
        return [WebhookTask(t.id, t.cluster, t.input, "holdout") for t in self._load().holdout]

    @property
    def safety(self) -> list[WebhookTask]:  # type: ignore[override]
        return [WebhookTask(t.id, t.cluster, t.input, "safety") for t in self._load().safety]


class WebhookWorkload:
    """A workload whose replay is the agent team's HTTP service.

    Options: `agent` (the agent the tasks belong to; default the workload's name), `holdout` and
    `safety` (task lists, instead of asking the service), `proxy_base_url` (where the service sends
    its model calls; default the context's endpoint) and `headers` (e.g. a shared secret).
    """

    def __init__(self, url: str, *, timeout_s: float = 300.0, options: Mapping[str, Any] | None = None) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"webhook url must be http(s), got {url!r}")
        self.url = url
        self.timeout_s = timeout_s
        self.options = dict(options or {})
        self.name = str(self.options.get("agent") or "webhook")

    def suite(self, context: WorkloadContext) -> ReplaySuite:
        options = {**self.options, **context.options}
        client = WebhookClient(self.url, self.timeout_s, options.get("headers"))
        runner = WebhookRunner(client, context, str(options.get("proxy_base_url") or context.endpoint))
        tasks = None
        if options.get("holdout"):
            try:
                tasks = _Tasks.model_validate({"holdout": options["holdout"], "safety": options.get("safety", [])})
            except ValidationError as err:
                raise ValueError(f"webhook workload tasks are invalid: {_reasons(err)}") from None
        return WebhookSuite(runner, self.name, tasks)
