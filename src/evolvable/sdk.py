"""Record an in-process agent run as an ATDP trajectory, governed like proxied traffic.

    import evolvable

    with evolvable.trajectory(agent="support", task_input=ticket) as t:
        call = t.llm_call(model="m", request_messages=[...], choices=[...])
        t.tool_call(tool_name="lookup_order", arguments={"id": 7}, result={...}, status="ok")
        t.signal("outcome", 1.0)

Two modes, one API:

- **proxy** (the default): the run is a session on the proxy's HTTP API (`proxy_url`, default
  `EVOLVABLE_PROXY_URL` or http://127.0.0.1:8400, authenticated by `api_key` / `EVOLVABLE_API_KEY`), so
  the proxy's redaction, consent, tenant policy and audit apply exactly as to captured calls;
- **direct** (`store=...` or `direct=True`): events go straight to a store, through the same Governor
  (`governance.Governor` on that store unless one is given), for processes that own the database.

Every step and signal is sent as it happens, so a crash keeps what was recorded so far. Leaving the
block ends the trajectory: `completed`, or `failed` when an exception escapes (re-raised). Signals may
still be attached after the block (late feedback).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any, Protocol, TypeVar

import httpx

from evolvable.errors import EvolvableError
from evolvable.protocol.models import (
    Event,
    HandoffStep,
    LLMCallStep,
    MemoryOpStep,
    MessageStep,
    Signal,
    SignalAttached,
    SignalKind,
    SkillUseStep,
    Step,
    StepAppended,
    ToolCallStep,
    TrajectoryEnded,
    TrajectoryHeader,
    TrajectoryStarted,
    TrajectoryStatus,
)
from evolvable.proxy.hooks import Governor
from evolvable.store import Store

__all__ = ["RecordingError", "TrajectoryRecorder", "trajectory"]

# Each step kind: `step()` hands back the kind it was given.
_AnyStep = TypeVar("_AnyStep", LLMCallStep, ToolCallStep, MessageStep, HandoffStep, MemoryOpStep, SkillUseStep)


class RecordingError(EvolvableError):
    """The proxy refused or could not take a record (its message says why)."""


class _Sink(Protocol):
    trajectory_id: str

    def step(self, step: Step) -> None: ...
    def signal(self, signal: Signal) -> Signal: ...
    def end(self, status: TrajectoryStatus, metadata: dict[str, Any]) -> None: ...


# --------------------------------------------------------------------------- direct: store + Governor


@cache
def _default_store(url: str) -> Store:
    """One store per database for the process: late signals still work after the block."""
    return Store.open(url)


_GOVERNORS: weakref.WeakKeyDictionary[Store, Governor] = weakref.WeakKeyDictionary()


def _governor_for(store: Store) -> Governor:
    """The governance pipeline the proxy's writer would apply, one per store (its caches live as long)."""
    if store not in _GOVERNORS:
        from evolvable.governance.pipeline import Governor as GovernancePipeline

        _GOVERNORS[store] = GovernancePipeline(store)
    return _GOVERNORS[store]


class _StoreSink:
    def __init__(self, store: Store, governor: Governor, header: TrajectoryHeader) -> None:
        self.store, self.governor, self.header = store, governor, header
        self.trajectory_id = header.id
        self._apply(TrajectoryStarted(header=header, trajectory_id=header.id, tenant_id=header.tenant_id))

    def _apply(self, event: Event) -> None:
        self.store.apply_events(self.governor.govern([event], {self.header.id: self.header.run_capture()}))

    def step(self, step: Step) -> None:
        self._apply(StepAppended(step=step, trajectory_id=self.header.id, tenant_id=self.header.tenant_id))

    def signal(self, signal: Signal) -> Signal:
        self._apply(SignalAttached(signal=signal, trajectory_id=self.header.id, tenant_id=self.header.tenant_id))
        return signal

    def end(self, status: TrajectoryStatus, metadata: dict[str, Any]) -> None:
        header = self.header
        self._apply(
            TrajectoryEnded(status=status, metadata=metadata, trajectory_id=header.id, tenant_id=header.tenant_id)
        )


# --------------------------------------------------------------------------- proxy: the session API


@cache
def _client(base_url: str) -> httpx.Client:
    return httpx.Client(base_url=base_url.rstrip("/"), timeout=30.0)


class _ProxySink:
    """A proxy session: the tenant key opens it, its own session key writes to it."""

    def __init__(self, base_url: str, api_key: str | None, session: dict[str, Any]) -> None:
        self.client = _client(base_url)
        created = self._post("/v1/sessions", session, api_key)
        self.trajectory_id: str = created["id"]
        self._key: str | None = created["api_key"]
        self._opener = api_key
        """The session key dies with the session's end; late signals are posted with the key that opened it."""

    def _post(self, path: str, body: dict[str, Any], key: str | None) -> dict[str, Any]:
        headers = {"authorization": f"Bearer {key}"} if key else {}
        try:
            r = self.client.post(path, json=body, headers=headers)
        except httpx.HTTPError as err:
            raise RecordingError(f"cannot reach the proxy at {self.client.base_url}: {err}") from None
        if r.status_code >= 400:
            try:
                message = r.json()["error"]["message"]
            except (ValueError, KeyError, TypeError):
                message = r.text[:500]
            raise RecordingError(f"the proxy refused {path} ({r.status_code}): {message}")
        answer: dict[str, Any] = r.json()
        return answer

    def step(self, step: Step) -> None:
        self._post(f"/v1/sessions/{self.trajectory_id}/steps", step.model_dump(mode="json"), self._key)

    def signal(self, signal: Signal) -> Signal:
        body = signal.model_dump(
            mode="json", include={"kind", "value", "step_id", "label", "source", "confidence", "metadata"}
        )
        path = f"/v1/sessions/{self.trajectory_id}/signals"
        (signal_id,) = self._post(path, {"signals": [body]}, self._key or self._opener)["signal_ids"]
        return signal.model_copy(update={"id": signal_id})

    def end(self, status: TrajectoryStatus, metadata: dict[str, Any]) -> None:
        extra = set(metadata) - {"reason"}
        if extra:
            raise ValueError(f"through the proxy a run ends with a reason only; not {sorted(extra)} (use reason=)")
        body: dict[str, Any] = {"status": status.value}
        if metadata.get("reason"):
            body["reason"] = str(metadata["reason"])[:500]
        self._post(f"/v1/sessions/{self.trajectory_id}/end", body, self._key)
        self._key = None


# --------------------------------------------------------------------------- the recorder


class TrajectoryRecorder:
    """Appends steps and signals to one trajectory. Made by `trajectory(...)`."""

    def __init__(self, sink: _Sink) -> None:
        self._sink = sink
        self.ended = False

    @property
    def id(self) -> str:
        return self._sink.trajectory_id

    def step(self, step: _AnyStep) -> _AnyStep:
        """Record any ATDP step; returns it (its `id` is what signals and `parent_step_id` refer to)."""
        self._sink.step(step)
        return step

    def llm_call(self, **fields: Any) -> LLMCallStep:
        return self.step(LLMCallStep(**fields))

    def tool_call(self, **fields: Any) -> ToolCallStep:
        return self.step(ToolCallStep(**fields))

    def message(self, **fields: Any) -> MessageStep:
        return self.step(MessageStep(**fields))

    def handoff(self, **fields: Any) -> HandoffStep:
        return self.step(HandoffStep(**fields))

    def memory_op(self, **fields: Any) -> MemoryOpStep:
        return self.step(MemoryOpStep(**fields))

    def skill_use(self, **fields: Any) -> SkillUseStep:
        return self.step(SkillUseStep(**fields))

    def signal(self, kind: SignalKind | str, value: float, step: Step | str | None = None, **fields: Any) -> Signal:
        """Attach a signal to the trajectory, or to a step (the step or its id). Allowed after the end."""
        step_id = step if isinstance(step, str) or step is None else step.id
        return self._sink.signal(Signal(kind=SignalKind(kind), value=value, step_id=step_id, **fields))

    def end(self, status: TrajectoryStatus | str = TrajectoryStatus.completed, **metadata: Any) -> None:
        """End the trajectory now (leaving the block then changes nothing). Through the proxy, only
        `reason=` travels with the end."""
        self._sink.end(TrajectoryStatus(status), metadata)
        self.ended = True

    def _fail(self, err: BaseException) -> None:
        message = f"{type(err).__name__}: {err}"[:500]
        if isinstance(self._sink, _ProxySink):
            self.end(TrajectoryStatus.failed, reason=message)
        else:
            self.end(TrajectoryStatus.failed, error={"type": type(err).__name__, "message": str(err)[:2000]})


def _open_sink(
    *,
    store: Store | None,
    direct: bool,
    governor: Governor | None,
    proxy_url: str | None,
    api_key: str | None,
    header: dict[str, Any],
) -> _Sink:
    from evolvable.settings import get_settings

    settings = get_settings()
    if store is not None or direct:
        store = store or _default_store(settings.resolved_db_url())
        header = {**header, "tenant_id": header.get("tenant_id") or "default"}
        return _StoreSink(store, governor or _governor_for(store), TrajectoryHeader(**header))
    given = ("tenant_id", "harness_version", "policy_version", "id")
    pinned = [{"id": "trajectory_id"}.get(key, key) for key in given if header.get(key)]
    if pinned:
        raise ValueError(
            f"{', '.join(pinned)}: the proxy decides these (the key names the tenant, the control plane "
            "pins versions, the session names the run); pass store= or direct=True to set them"
        )
    session = {k: header[k] for k in ("agent", "task_input", "task_id", "end_user", "metadata") if header.get(k)}
    return _ProxySink(proxy_url or settings.proxy_url, api_key or settings.api_key, session)


@contextmanager
def trajectory(
    agent: str = "default",
    task_input: Any = None,
    *,
    proxy_url: str | None = None,
    api_key: str | None = None,
    store: Store | None = None,
    direct: bool = False,
    governor: Governor | None = None,
    tenant_id: str | None = None,
    end_user: str | None = None,
    harness_version: str | None = None,
    policy_version: str | None = None,
    task_id: str | None = None,
    metadata: dict[str, Any] | None = None,
    trajectory_id: str | None = None,
) -> Iterator[TrajectoryRecorder]:
    """Record one run: through the proxy by default; `store=` (or `direct=True`: the settings' database)
    writes directly, governed by `governor` (default: the governance pipeline on that store)."""
    header = {
        "agent": agent,
        "task_input": task_input,
        "tenant_id": tenant_id,
        "end_user": end_user,
        "harness_version": harness_version,
        "policy_version": policy_version,
        "task_id": task_id,
        "metadata": metadata or {},
        **({"id": trajectory_id} if trajectory_id else {}),
    }
    sink = _open_sink(
        store=store, direct=direct, governor=governor, proxy_url=proxy_url, api_key=api_key, header=header
    )
    recorder = TrajectoryRecorder(sink)
    try:
        yield recorder
    except BaseException as err:
        if not recorder.ended:
            recorder._fail(err)
        raise
    if not recorder.ended:
        recorder.end(TrajectoryStatus.completed)
