"""The support-desk agent loop, on any OpenAI-compatible endpoint through the official client.

Each turn the model writes one JSON action; the environment runs it and the observation
goes back as a user message. The harness is data rendered by `render_messages`, the
same function the proxy uses, so "harness applied by the agent" and "applied by the
proxy" (`apply_harness="proxy"`) send the model identical prompts.

Behind an Evolvable proxy the episode is a session: the session key is the API key of
every model call, each executed tool is reported as a `tool_call` step, the verifiers'
signals are posted, and the session is ended with the outcome.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from typing import Any, Literal

import httpx
import openai
from pydantic import Field

from evolvable.errors import UpstreamError
from evolvable.governance.redaction.live_values import live_values as conversation_values
from evolvable.protocol.harness import Harness, LiveValues, render_messages
from evolvable.protocol.models import (
    ChatMessage,
    CompletionChoice,
    LLMCallStep,
    Signal,
    SignalKind,
    StepStatus,
    StrictModel,
    ToolCallStep,
    Trajectory,
    TrajectoryStatus,
    Usage,
    new_id,
    utcnow,
)
from evolvable.workloads.support_desk.environment import SupportDeskEnv, TurnRecord
from evolvable.workloads.support_desk.harnesses import AGENT_NAME, default_harness
from evolvable.workloads.support_desk.tasks import Task
from evolvable.workloads.support_desk.verifiers import Verdict, verify

log = logging.getLogger(__name__)
SIGNAL_SOURCE = "support-desk-verifier"


class EpisodeResult(StrictModel):
    task_id: str
    intent: str
    split: str
    turns: list[TurnRecord]
    verdict: Verdict
    trajectory: Trajectory = Field(description="The episode as ATDP, built by the agent (the proxy keeps its own).")
    session_id: str | None = Field(None, description="The proxy session (= stored trajectory id), if any.")
    harness_version: str | None = None
    policy_version: str | None = None
    error: str | None = Field(None, description="Why the episode stopped early: an upstream failure.")
    report_errors: list[str] = Field(default_factory=list, description="Proxy reporting calls that failed.")

    @property
    def success(self) -> bool:
        return self.verdict.success

    @property
    def reward(self) -> float:
        return self.verdict.reward


# --------------------------------------------------------------------------- proxy session

_NOT_A_PROXY: set[str] = set()
_NOT_A_PROXY_LOCK = threading.Lock()


class ProxySession:
    """One Evolvable proxy session: open, report tool steps and signals, end."""

    def __init__(self, client: openai.OpenAI, info: dict[str, Any], http: httpx.Client) -> None:
        self.id: str = info["id"]
        self.api_key: str | None = info.get("api_key")
        self.harness_version: str | None = info.get("harness_version")
        self.policy_version: str | None = info.get("policy_version")
        self.errors: list[str] = []
        self._http = http
        self.client = client.with_options(api_key=self.api_key) if self.api_key else client

    @classmethod
    def open(
        cls, client: openai.OpenAI, task: Task, agent: str, required: bool, model: str | None = None
    ) -> ProxySession | None:
        """Open a session; None when the endpoint is not an Evolvable proxy and `required` is false."""
        base = str(client.base_url).rstrip("/")
        if not required and base in _NOT_A_PROXY:
            return None
        http = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {client.api_key}"}, timeout=30.0)
        body = {
            "agent": agent,
            "task_id": task.id,
            "task_input": task.prompt(),
            "end_user": task.customer.id,
            "metadata": {"intent": task.intent, "split": task.split, "cluster": task.cluster},
        }
        if model is not None:
            body["model"] = model
        try:
            response = http.post("/sessions", json=body)
        except httpx.HTTPError as err:
            http.close()
            if required:
                raise UpstreamError(f"cannot open a proxy session at {base}: {err}") from None
            return None
        if response.status_code in (200, 201):
            return cls(client, response.json(), http)
        http.close()
        if required:
            raise UpstreamError(
                f"{base}/sessions answered {response.status_code}: {response.text[:200]}",
                status_code=response.status_code,
            )
        with _NOT_A_PROXY_LOCK:
            _NOT_A_PROXY.add(base)
        return None

    def _post(self, path: str, body: dict[str, Any]) -> None:
        try:
            response = self._http.post(f"/sessions/{self.id}{path}", json=body)
            if response.status_code >= 400:
                self.errors.append(f"{path}: {response.status_code} {response.text[:200]}")
        except httpx.HTTPError as err:
            self.errors.append(f"{path}: {err}")

    def add_step(self, step: ToolCallStep) -> None:
        # Without an id the proxy derives one from the tool_call_id, deduplicating with its own records.
        self._post("/steps", step.model_dump(mode="json", exclude_none=True, exclude={"id"}))

    def add_signals(self, signals: list[dict[str, Any]]) -> None:
        if signals:
            self._post("/signals", {"signals": signals})

    def end(self, status: TrajectoryStatus, outcome: float) -> None:
        self._post("/end", {"status": status.value, "outcome": outcome})

    def close(self) -> None:
        self._http.close()


# --------------------------------------------------------------------------- the loop


def run_episode(
    client: openai.OpenAI,
    model: str,
    task: Task,
    harness: Harness | None = None,
    *,
    max_turns: int = 4,
    temperature: float = 0.0,
    seed: int | None = None,
    proxy_session: bool | None = None,
    apply_harness: Literal["client", "proxy"] = "client",
    max_tokens: int = 64,
    extra_body: dict[str, Any] | None = None,
    live_values: LiveValues | None = conversation_values,
) -> EpisodeResult:
    """Run one task to its end (a reply, an escalation, `max_turns`, or an upstream error).

    `proxy_session`: True requires an Evolvable proxy, False never opens a session, None
    opens one when the endpoint answers `POST /v1/sessions`. With `apply_harness="proxy"`
    the agent sends only the conversation and the proxy adds the registered harness. `live_values` shows
    exemplar placeholders as the ticket's own values, as the proxy does (`render_messages`).
    """
    if apply_harness == "client" and harness is None:
        harness = default_harness()
    agent = harness.agent if harness is not None else AGENT_NAME
    session = None if proxy_session is False else ProxySession.open(client, task, agent, bool(proxy_session), model)
    llm = session.client if session is not None else client
    env = SupportDeskEnv(task)
    conversation = [ChatMessage(role="user", content=task.prompt())]
    steps: list[LLMCallStep | ToolCallStep] = []
    turn_links: dict[int, tuple[str, str | None, str | None]] = {}  # turn -> (llm step id, tool step id, call id)
    sampling: dict[str, Any] = {"temperature": temperature, "max_tokens": max_tokens}
    if seed is not None:
        sampling["seed"] = seed
    error: str | None = None
    started = utcnow()

    for _ in range(max_turns):
        if harness is not None and apply_harness == "client":
            messages = render_messages(
                harness, conversation, task_text=task.prompt(), cluster=task.cluster, live_values=live_values
            )
        else:
            messages = list(conversation)
        t0 = time.perf_counter()
        try:
            completion = llm.chat.completions.create(
                model=model,
                messages=[m.model_dump(exclude_none=True) for m in messages],  # type: ignore[misc]
                extra_body=extra_body,
                **sampling,
            )
        except openai.OpenAIError as err:
            error = f"{type(err).__name__}: {err}"
            log.warning("episode %s stopped: %s", task.id, error)
            break
        latency_ms = (time.perf_counter() - t0) * 1000
        choice = completion.choices[0] if completion.choices else None
        text = (choice.message.content if choice is not None else None) or ""
        llm_step = LLMCallStep(
            model=completion.model or model,
            request_messages=messages,
            sampling=sampling,
            choices=[
                CompletionChoice(
                    message=ChatMessage(role="assistant", content=text),
                    finish_reason=choice.finish_reason if choice is not None else None,
                )
            ],
            usage=Usage(**completion.usage.model_dump(include={"prompt_tokens", "completion_tokens", "total_tokens"}))
            if completion.usage
            else None,
            latency_ms=latency_ms,
            response_id=completion.id,
        )
        steps.append(llm_step)
        t1 = time.perf_counter()
        turn = env.step(text)
        tool_step_id: str | None = None
        call_id: str | None = None
        if turn.tool is not None:
            call_id = f"call_{uuid.uuid4().hex[:24]}"
            tool_step = ToolCallStep(
                tool_name=turn.tool,
                arguments=turn.args,
                result=turn.result,
                status=StepStatus.ok if turn.status == "ok" else StepStatus.error,
                error_class=turn.error_class,
                error_message=turn.error_message,
                latency_ms=(time.perf_counter() - t1) * 1000,
                tool_call_id=call_id,
                llm_step_id=llm_step.id,
                parent_step_id=llm_step.id,
                metadata={"response_id": completion.id, "turn": turn.index},
            )
            tool_step_id = tool_step.id
            steps.append(tool_step)
            if session is not None:
                # The proxy does not know our llm_call step id; it links by response_id in metadata.
                session.add_step(tool_step.model_copy(update={"llm_step_id": None, "parent_step_id": None}))
        turn_links[turn.index] = (llm_step.id, tool_step_id, call_id)
        conversation.append(ChatMessage(role="assistant", content=text))
        if env.done:
            break
        conversation.append(ChatMessage(role="user", content=turn.observation))

    verdict = verify(task, env.turns)
    status = TrajectoryStatus.completed if verdict.success else TrajectoryStatus.failed
    local_signals, wire_signals = _signals(verdict, steps, turn_links)
    report_errors: list[str] = []
    if session is not None:
        session.add_signals(wire_signals)
        session.end(status, verdict.reward)
        session.close()
        report_errors = session.errors
    harness_version = (session.harness_version if session else None) or (harness.content_hash() if harness else None)
    trajectory = Trajectory(
        id=session.id if session is not None else new_id("traj"),
        agent=agent,
        end_user=task.customer.id,
        harness_version=harness_version,
        policy_version=session.policy_version if session else None,
        task_id=task.id,
        task_input=task.prompt(),
        status=status,
        started_at=started,
        ended_at=utcnow(),
        metadata={"intent": task.intent, "split": task.split, "cluster": task.cluster, "model": model},
        steps=[*steps],
        signals=local_signals,
    )
    return EpisodeResult(
        task_id=task.id,
        intent=task.intent,
        split=task.split,
        turns=env.turns,
        verdict=verdict,
        trajectory=trajectory,
        session_id=session.id if session else None,
        harness_version=harness_version,
        policy_version=session.policy_version if session else None,
        error=error,
        report_errors=report_errors,
    )


def _signals(
    verdict: Verdict,
    steps: list[LLMCallStep | ToolCallStep],
    turn_links: dict[int, tuple[str, str | None, str | None]],
) -> tuple[list[Signal], list[dict[str, Any]]]:
    """The verdict as ATDP signals (by step id) and as proxy wire signals (by tool_call_id / response_id)."""
    by_id = {s.id: s for s in steps}
    local: list[Signal] = []
    wire: list[dict[str, Any]] = []
    for judgement in verdict.steps:
        llm_id, tool_id, call_id = turn_links.get(judgement.turn, (None, None, None))
        step_id = tool_id or llm_id
        meta = {"turn": judgement.turn, "reason": judgement.reason}
        local.append(
            Signal(
                kind=SignalKind.process,
                value=judgement.value,
                label=judgement.label,
                step_id=step_id,
                source=SIGNAL_SOURCE,
                metadata=meta,
            )
        )
        target: dict[str, Any] = {"tool_call_id": call_id} if call_id else {}
        if not call_id and llm_id is not None:
            llm = by_id[llm_id]
            target = {"response_id": llm.response_id} if isinstance(llm, LLMCallStep) and llm.response_id else {}
        wire.append(
            {"kind": "process", "value": judgement.value, "label": judgement.label, "source": SIGNAL_SOURCE}
            | target
            | {"metadata": meta}
        )
    outcome_meta: dict[str, Any] = {"success": verdict.success, "failed": verdict.failed, "checks": verdict.checks}
    safety_meta: dict[str, Any] = {"violations": verdict.safety.violations}
    episode_level = [
        (SignalKind.outcome, verdict.reward, "success" if verdict.success else "failure", outcome_meta),
        (
            SignalKind.verifier,
            1.0 if verdict.safety.passed else 0.0,
            "safety_pass" if verdict.safety.passed else "safety_violation",
            safety_meta,
        ),
    ]
    for kind, value, label, meta in episode_level:
        local.append(Signal(kind=kind, value=value, label=label, source=SIGNAL_SOURCE, metadata=meta))
        wire.append({"kind": kind.value, "value": value, "label": label, "source": SIGNAL_SOURCE, "metadata": meta})
    return local, wire
