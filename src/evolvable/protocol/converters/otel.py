"""ATDP <-> OpenTelemetry GenAI spans in OTLP JSON (the shape OTLP/HTTP JSON exporters write).

Span shapes follow the GenAI semantic conventions (status: development):
`invoke_agent {agent}` for the run, `chat {model}` for model calls, `execute_tool {name}` for
tool calls, and `gen_ai.evaluation.result` events for signals. Content attributes
(`gen_ai.input.messages`, `gen_ai.output.messages`) use the conventions' parts format.
What the conventions have no name for (token ids, logprobs, step ids, policy versions)
travels under `evolvable.*` so ATDP -> OTLP -> ATDP is lossless; foreign traces without
those attributes still convert from the standard ones.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from evolvable.errors import ConversionError
from evolvable.protocol.converters.stamps import known_stamps
from evolvable.protocol.models import (
    ChatMessage,
    CompletionChoice,
    ErrorInfo,
    FunctionCall,
    HandoffStep,
    LLMCallStep,
    Signal,
    SignalKind,
    StepStatus,
    ToolCall,
    ToolCallStep,
    Trajectory,
    TrajectoryHeader,
    TrajectoryStatus,
    Usage,
)
from evolvable.protocol.validation import describe

SCOPE = {"name": "evolvable.atdp", "version": "1.0.0"}
EVALUATION_EVENT = "gen_ai.evaluation.result"
_STEP_ADAPTER = None  # built lazily: a TypeAdapter over the Step union


# --------------------------------------------------------------------------- OTLP value helpers


def _value(v: Any) -> dict[str, Any]:
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)}
    if isinstance(v, float):
        return {"doubleValue": v}
    if isinstance(v, list | tuple):
        return {"arrayValue": {"values": [_value(x) for x in v]}}
    return {"stringValue": str(v)}


def _attrs(d: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"key": k, "value": _value(v)} for k, v in d.items() if v is not None]


def _unvalue(v: dict[str, Any]) -> Any:
    if "stringValue" in v:
        return v["stringValue"]
    if "intValue" in v:
        return int(v["intValue"])
    if "doubleValue" in v:
        return float(v["doubleValue"])
    if "boolValue" in v:
        return bool(v["boolValue"])
    if "arrayValue" in v:
        return [_unvalue(x) for x in v["arrayValue"].get("values", [])]
    if "kvlistValue" in v:
        return {kv["key"]: _unvalue(kv.get("value", {})) for kv in v["kvlistValue"].get("values", [])}
    return None


def _unattrs(items: list[dict[str, Any]] | None) -> dict[str, Any]:
    return {a["key"]: _unvalue(a.get("value", {})) for a in items or []}


def _nanos(t: datetime | None) -> str | None:
    return None if t is None else str(int(t.timestamp() * 1_000_000) * 1000)


def _from_nanos(v: Any) -> datetime | None:
    if v in (None, "", 0, "0"):
        return None
    return datetime.fromtimestamp(int(v) / 1e9, UTC)


def _hex_id(seed: str, length: int) -> str:
    return hashlib.sha256(seed.encode()).hexdigest()[:length]


def span_step_id(trace_id: str, span_id: str) -> str:
    """The step id of a foreign span: derived, so a re-sent span is the same step (idempotent ingest)."""
    return f"step_{_hex_id(f'{trace_id}:{span_id}', 32)}"


def _json(v: Any) -> str:
    return json.dumps(v, separators=(",", ":"), default=str)


def _maybe_json(v: Any) -> Any:
    if isinstance(v, str):
        try:
            return json.loads(v)
        except json.JSONDecodeError:
            return v
    return v


# --------------------------------------------------------------------------- messages <-> parts


def _to_parts_message(m: ChatMessage) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    if m.role == "tool":
        parts.append({"type": "tool_call_response", "id": m.tool_call_id, "response": m.text()})
    elif m.text():
        parts.append({"type": "text", "content": m.text()})
    for call in m.tool_calls or []:
        parts.append(
            {
                "type": "tool_call",
                "id": call.id,
                "name": call.function.name,
                "arguments": _maybe_json(call.function.arguments),
            }
        )
    return {"role": m.role, "parts": parts}


def _from_parts_message(raw: dict[str, Any]) -> ChatMessage:
    if "parts" not in raw:  # OpenAI-shaped messages from older instrumentations
        return ChatMessage.model_validate(raw)
    text, calls, tool_call_id = [], [], None
    for p in raw.get("parts", []):
        kind = p.get("type")
        if kind == "text":
            text.append(str(p.get("content", "")))
        elif kind == "tool_call":
            args = p.get("arguments")
            calls.append(
                ToolCall(
                    id=str(p.get("id")),
                    function=FunctionCall(
                        name=str(p.get("name")), arguments=args if isinstance(args, str) else _json(args)
                    ),
                )
            )
        elif kind == "tool_call_response":
            tool_call_id = p.get("id")
            resp = p.get("response")
            text.append(resp if isinstance(resp, str) else _json(resp))
    return ChatMessage(
        role=raw.get("role", "user"),
        content="".join(text) if text or not calls else None,
        tool_calls=calls or None,
        tool_call_id=tool_call_id,
    )


# --------------------------------------------------------------------------- ATDP -> OTLP


def _signal_event(sig: Signal) -> dict[str, Any]:
    return {
        "timeUnixNano": _nanos(sig.created_at),
        "name": EVALUATION_EVENT,
        "attributes": _attrs(
            {
                "gen_ai.evaluation.name": sig.source,
                "gen_ai.evaluation.score.value": float(sig.value),
                "gen_ai.evaluation.score.label": sig.label,
                "evolvable.signal": _json(sig.model_dump(mode="json")),
            }
        ),
    }


def _llm_span_attrs(step: LLMCallStep, t: Trajectory) -> dict[str, Any]:
    first = step.choices[0] if step.choices else None
    attrs: dict[str, Any] = {
        "gen_ai.operation.name": "chat" if step.endpoint == "chat" else "text_completion",
        "gen_ai.provider.name": step.metadata.get("provider", "openai"),
        "gen_ai.request.model": step.model,
        "gen_ai.response.model": step.model,
        "gen_ai.response.id": step.response_id,
        "gen_ai.conversation.id": t.id,
        "gen_ai.agent.name": step.agent or t.agent,
        "gen_ai.response.finish_reasons": [c.finish_reason or "" for c in step.choices] or None,
        "gen_ai.usage.input_tokens": step.usage.prompt_tokens if step.usage else None,
        "gen_ai.usage.output_tokens": step.usage.completion_tokens if step.usage else None,
        "gen_ai.request.temperature": step.sampling.get("temperature"),
        "gen_ai.request.top_p": step.sampling.get("top_p"),
        "gen_ai.request.max_tokens": step.sampling.get("max_tokens"),
        "gen_ai.request.seed": step.sampling.get("seed"),
        "gen_ai.request.choice.count": step.sampling.get("n"),
        "gen_ai.input.messages": _json([_to_parts_message(m) for m in step.request_messages]),
        "gen_ai.output.messages": _json(
            [
                {**_to_parts_message(c.message), "finish_reason": c.finish_reason}
                for c in step.choices
                if c.message is not None
            ]
        ),
        "gen_ai.tool.definitions": _json(step.tools) if step.tools else None,
        "error.type": step.error.type if step.error else None,
        "evolvable.step.id": step.id,
        # Everything else, lossless (token ids, logprobs, timings, sampling, prompt text).
        "evolvable.step": _json(step.model_dump(mode="json")),
    }
    if first is None:
        attrs.pop("gen_ai.output.messages")
    return attrs


def _span(
    t: Trajectory,
    span_seed: str,
    parent: str | None,
    name: str,
    attrs: dict[str, Any],
    start: datetime,
    end: datetime | None,
) -> dict[str, Any]:
    return {
        "traceId": _hex_id(t.id, 32),
        "spanId": _hex_id(span_seed, 16),
        "parentSpanId": parent or "",
        "name": name,
        "kind": 3 if name.startswith(("chat", "text_completion")) else 1,
        "startTimeUnixNano": _nanos(start),
        "endTimeUnixNano": _nanos(end or start),
        "attributes": _attrs(attrs),
        "events": [],
        "status": {"code": 0},
    }


def to_otel(trajectories: Iterable[Trajectory], *, service_name: str = "evolvable") -> dict[str, Any]:
    """One OTLP `ExportTraceServiceRequest` JSON document for the given trajectories."""
    spans: list[dict[str, Any]] = []
    for t in trajectories:
        root_id = _hex_id(f"{t.id}:root", 16)
        root = _span(
            t,
            f"{t.id}:root",
            None,
            f"invoke_agent {t.agent}",
            {
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": t.agent,
                "gen_ai.conversation.id": t.id,
                "evolvable.trajectory": _json(t.header().model_dump(mode="json")),
            },
            t.started_at,
            t.ended_at,
        )
        if t.status == TrajectoryStatus.failed:
            root["status"] = {"code": 2, "message": "failed"}
        by_step: dict[str, dict[str, Any]] = {}
        spans.append(root)
        for step in t.steps:
            parent = _hex_id(step.parent_step_id, 16) if step.parent_step_id else root_id
            if isinstance(step, LLMCallStep):
                span = _span(
                    t,
                    step.id,
                    parent,
                    f"chat {step.model or ''}".strip(),
                    _llm_span_attrs(step, t),
                    step.started_at,
                    step.ended_at,
                )
                if step.status == StepStatus.error:
                    span["status"] = {"code": 2, "message": step.error.message if step.error else "error"}
            elif isinstance(step, ToolCallStep):
                args = (
                    step.arguments
                    if isinstance(step.arguments, str) or step.arguments is None
                    else _json(step.arguments)
                )
                result = step.result if isinstance(step.result, str) or step.result is None else _json(step.result)
                span = _span(
                    t,
                    step.id,
                    _hex_id(step.llm_step_id, 16) if step.llm_step_id and not step.parent_step_id else parent,
                    f"execute_tool {step.tool_name}",
                    {
                        "gen_ai.operation.name": "execute_tool",
                        "gen_ai.tool.name": step.tool_name,
                        "gen_ai.tool.type": "function",
                        "gen_ai.tool.call.id": step.tool_call_id,
                        "gen_ai.tool.call.arguments": args,
                        "gen_ai.tool.call.result": result,
                        "gen_ai.conversation.id": t.id,
                        "error.type": step.error_class,
                        "evolvable.step.id": step.id,
                        "evolvable.step": _json(step.model_dump(mode="json")),
                    },
                    step.started_at,
                    step.ended_at,
                )
                if step.status == StepStatus.error:
                    span["status"] = {"code": 2, "message": step.error_message or step.error_class or "error"}
            else:
                span = _span(
                    t,
                    step.id,
                    parent,
                    f"evolvable.{step.kind}",
                    {"evolvable.step.id": step.id, "evolvable.step": _json(step.model_dump(mode="json"))},
                    step.started_at,
                    step.ended_at,
                )
            by_step[step.id] = span
            spans.append(span)
        for sig in t.signals:
            target = by_step.get(sig.step_id) if sig.step_id else root
            (target or root)["events"].append(_signal_event(sig))
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": _attrs({"service.name": service_name})},
                "scopeSpans": [{"scope": SCOPE, "spans": spans}],
            }
        ]
    }


# --------------------------------------------------------------------------- OTLP -> ATDP


def _step_adapter() -> Any:
    global _STEP_ADAPTER
    if _STEP_ADAPTER is None:
        from pydantic import TypeAdapter

        from evolvable.protocol.models import Step

        _STEP_ADAPTER = TypeAdapter(Step)
    return _STEP_ADAPTER


def _iter_spans(doc: dict[str, Any]) -> Iterable[dict[str, Any]]:
    for rs in doc.get("resourceSpans", []):
        for ss in rs.get("scopeSpans", rs.get("instrumentationLibrarySpans", [])):
            yield from ss.get("spans", [])


def _is_error(span: dict[str, Any]) -> bool:
    code = (span.get("status") or {}).get("code", 0)
    return code in (2, "STATUS_CODE_ERROR")


def _signals_of(span: dict[str, Any], step_id: str | None) -> list[Signal]:
    out = []
    for index, ev in enumerate(span.get("events", [])):
        if ev.get("name") != EVALUATION_EVENT:
            continue
        a = _unattrs(ev.get("attributes"))
        if "evolvable.signal" in a:
            out.append(Signal.model_validate_json(a["evolvable.signal"]))
            continue
        value = a.get("gen_ai.evaluation.score.value")
        if value is None:
            continue
        out.append(
            Signal(
                id="sig_" + _hex_id(":".join((*_span_key(span), str(index))), 32),
                kind=SignalKind.judge,
                value=float(value),
                label=a.get("gen_ai.evaluation.score.label"),
                source=str(a.get("gen_ai.evaluation.name", "otel")),
                step_id=step_id,
                created_at=_from_nanos(ev.get("timeUnixNano")) or datetime.now(UTC),
            )
        )
    return out


def _llm_from_span(span: dict[str, Any], a: dict[str, Any], agent: str | None) -> LLMCallStep:
    msgs = _maybe_json(a.get("gen_ai.input.messages")) or []
    outs = _maybe_json(a.get("gen_ai.output.messages")) or []
    system = _maybe_json(a.get("gen_ai.system_instructions"))
    request = [_from_parts_message(m) for m in msgs]
    if system and not any(m.role == "system" for m in request):
        text = (
            system if isinstance(system, str) else "".join(p.get("content", "") for p in system if isinstance(p, dict))
        )
        request.insert(0, ChatMessage(role="system", content=text))
    finish = a.get("gen_ai.response.finish_reasons") or []
    choices = [
        CompletionChoice(
            index=i,
            message=_from_parts_message(o),
            finish_reason=o.get("finish_reason") or (finish[i] if i < len(finish) else None),
        )
        for i, o in enumerate(outs)
    ]
    sampling = {
        k: a[f"gen_ai.request.{k}"]
        for k in ("temperature", "top_p", "max_tokens", "seed")
        if a.get(f"gen_ai.request.{k}") is not None
    }
    inp, outp = a.get("gen_ai.usage.input_tokens"), a.get("gen_ai.usage.output_tokens")
    error = _is_error(span) or a.get("error.type") is not None
    start, end = _from_nanos(span.get("startTimeUnixNano")), _from_nanos(span.get("endTimeUnixNano"))
    return LLMCallStep(
        agent=agent,
        model=a.get("gen_ai.response.model") or a.get("gen_ai.request.model"),
        endpoint="completions" if a.get("gen_ai.operation.name") == "text_completion" else "chat",
        request_messages=request,
        tools=_maybe_json(a.get("gen_ai.tool.definitions")),
        sampling=sampling,
        choices=choices,
        usage=Usage(prompt_tokens=inp or 0, completion_tokens=outp or 0, total_tokens=(inp or 0) + (outp or 0))
        if inp is not None or outp is not None
        else None,
        response_id=a.get("gen_ai.response.id"),
        status=StepStatus.error if error else StepStatus.ok,
        error=ErrorInfo(type=str(a.get("error.type") or "error"), message=(span.get("status") or {}).get("message", ""))
        if error
        else None,
        latency_ms=(end - start).total_seconds() * 1000 if start and end else None,
        metadata={"provider": a["gen_ai.provider.name"]} if a.get("gen_ai.provider.name") else {},
        **known_stamps(start, end),
    )


def _tool_from_span(span: dict[str, Any], a: dict[str, Any], agent: str | None) -> ToolCallStep:
    args = _maybe_json(a.get("gen_ai.tool.call.arguments"))
    start, end = _from_nanos(span.get("startTimeUnixNano")), _from_nanos(span.get("endTimeUnixNano"))
    error = _is_error(span) or a.get("error.type") is not None
    return ToolCallStep(
        agent=agent,
        tool_name=str(
            a.get("gen_ai.tool.name") or span.get("name", "").removeprefix("execute_tool ").strip() or "unknown"
        ),
        arguments=args if isinstance(args, dict | str) or args is None else _json(args),
        result=_maybe_json(a.get("gen_ai.tool.call.result")),
        status=StepStatus.error if error else StepStatus.ok,
        error_class=a.get("error.type"),
        error_message=(span.get("status") or {}).get("message") if error else None,
        tool_call_id=a.get("gen_ai.tool.call.id"),
        latency_ms=(end - start).total_seconds() * 1000 if start and end else None,
        **known_stamps(start, end),
    )


def from_otel(doc: dict[str, Any], *, tenant_id: str = "default") -> list[Trajectory]:
    """Trajectories from an OTLP JSON document: one per trace (gen_ai.conversation.id or traceId)."""
    if not isinstance(doc, dict) or "resourceSpans" not in doc:
        raise ConversionError("not an OTLP JSON trace document: missing 'resourceSpans'")
    traces: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for span in _iter_spans(doc):
        traces[span.get("traceId", "")].append(span)
    out = []
    for trace_id, spans in traces.items():
        try:
            out.append(_trace_to_trajectory(trace_id, spans, tenant_id).trajectory)
        except ValidationError as err:
            raise ConversionError(f"trace {trace_id}: " + "; ".join(describe(err))) from None
        except (AttributeError, KeyError, TypeError, ValueError) as err:
            raise ConversionError(f"trace {trace_id}: malformed span ({type(err).__name__}: {err})") from None
    return out


def merge_documents(docs: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """One OTLP JSON document from several (e.g. the lines of a collector file), each span once.

    A trace whose spans were exported in several batches then converts to one trajectory; a span
    sent twice (exporter retries) counts once, its last copy winning."""
    docs = list(docs)
    for n, doc in enumerate(docs, start=1):
        if not isinstance(doc, dict) or "resourceSpans" not in doc:
            raise ConversionError(f"document {n}: not an OTLP JSON trace document: missing 'resourceSpans'")
    try:
        last = {_span_key(span): id(span) for doc in docs for span in _iter_spans(doc)}
        resource_spans = []
        for doc in docs:
            for rs in doc["resourceSpans"]:
                scopes = [
                    {**ss, "spans": [span for span in ss.get("spans", []) if last[_span_key(span)] == id(span)]}
                    for ss in rs.get("scopeSpans", rs.get("instrumentationLibrarySpans", []))
                ]
                resource_spans.append({"resource": rs.get("resource", {}), "scopeSpans": scopes})
    except (AttributeError, TypeError) as err:
        raise ConversionError(f"not an OTLP JSON trace document: {err}") from None
    return {"resourceSpans": resource_spans}


def _span_key(span: dict[str, Any]) -> tuple[str, str]:
    return str(span.get("traceId", "")), str(span.get("spanId", ""))


@dataclass
class TraceFragment:
    """The spans of one trace that arrived together, as a trajectory to merge into the stored one.

    `trajectory` holds this fragment's steps and signals; its header counts only when `has_root` (the
    trace's root span, the one without a parent, is in the fragment: that is when a trace is complete).
    `outside_parents` maps a step to its parent span when that span was not in the fragment (it may be
    a step stored from an earlier batch)."""

    trace_id: str
    trajectory: Trajectory
    has_root: bool
    span_count: int
    outside_parents: dict[str, str] = field(default_factory=dict)


def trace_fragments(doc: dict[str, Any], *, tenant_id: str) -> tuple[list[TraceFragment], list[str]]:
    """An OTLP export request split by trace, each trace keyed `traj_<traceId>` and owned by `tenant_id`.

    Returns the fragments and, for spans that cannot be stored (no trace or span id, a trace that does
    not convert), one reason per rejected span."""
    if not isinstance(doc, dict) or "resourceSpans" not in doc:
        raise ConversionError("not an OTLP JSON trace document: missing 'resourceSpans'")
    traces: dict[str, list[dict[str, Any]]] = defaultdict(list)
    rejected: list[str] = []
    try:
        spans = list(_iter_spans(doc))
    except (AttributeError, TypeError) as err:
        raise ConversionError(f"not an OTLP JSON trace document: {err}") from None
    for span in spans:
        if not isinstance(span, dict):
            rejected.append("a span that is not an object")
            continue
        trace_id, span_id = str(span.get("traceId") or ""), str(span.get("spanId") or "")
        if not (_is_hex(trace_id, 32) and _is_hex(span_id, 16)):
            rejected.append(f"span {span.get('name')!r}: traceId and spanId must be 32 and 16 hex digits")
            continue
        traces[trace_id].append(span)
    out = []
    for trace_id, trace_spans in traces.items():
        try:
            out.append(_trace_to_trajectory(trace_id, trace_spans, tenant_id, trajectory_id=f"traj_{trace_id}"))
        except ValidationError as err:
            rejected += [f"trace {trace_id}: " + "; ".join(describe(err))] * len(trace_spans)
        except (AttributeError, KeyError, TypeError, ValueError) as err:  # malformed span fields
            reason = f"trace {trace_id}: malformed span ({type(err).__name__}: {err})"
            rejected += [reason] * len(trace_spans)
    return out, rejected


def _is_hex(value: str, length: int) -> bool:
    try:
        return len(value) == length and int(value, 16) != 0
    except ValueError:
        return False


def _trace_to_trajectory(
    trace_id: str, spans: list[dict[str, Any]], tenant_id: str, *, trajectory_id: str | None = None
) -> TraceFragment:
    """`trajectory_id` set: the id and tenant are forced (a receiver must not trust the sender's header)."""
    spans = sorted(spans, key=lambda s: int(s.get("startTimeUnixNano") or 0))
    by_id = {s.get("spanId"): s for s in spans}
    attrs = {s.get("spanId"): _unattrs(s.get("attributes")) for s in spans}

    def op(sid: str) -> str | None:
        a = attrs[sid]
        if a.get("gen_ai.operation.name"):
            return str(a["gen_ai.operation.name"])
        name = by_id[sid].get("name", "")
        for prefix in ("invoke_agent", "execute_tool", "chat", "text_completion"):
            if name.startswith(prefix):
                return prefix
        return None

    def agent_ancestors(sid: str) -> list[str]:
        chain, cur = [], by_id[sid].get("parentSpanId")
        while cur and cur in by_id:
            if op(cur) == "invoke_agent":
                chain.append(cur)
            cur = by_id[cur].get("parentSpanId")
        return chain

    agent_spans = [s["spanId"] for s in spans if op(s["spanId"]) == "invoke_agent"]
    roots = [sid for sid in agent_spans if not agent_ancestors(sid)]
    root = roots[0] if roots else None
    header: dict[str, Any] = {}
    if root and "evolvable.trajectory" in attrs[root]:
        header = json.loads(attrs[root]["evolvable.trajectory"])
    else:
        ra = attrs[root] if root else {}
        conv = ra.get("gen_ai.conversation.id") or next(
            (a.get("gen_ai.conversation.id") for a in attrs.values() if a.get("gen_ai.conversation.id")), None
        )
        rspan = by_id[root] if root else spans[0]
        header = {
            "id": str(conv) if conv else f"traj_{trace_id}",
            "tenant_id": tenant_id,
            "agent": ra.get("gen_ai.agent.name") or "default",
            "status": "failed" if root and _is_error(by_id[root]) else "completed",
            "started_at": _from_nanos(rspan.get("startTimeUnixNano")),
            "ended_at": _from_nanos(by_id[root].get("endTimeUnixNano")) if root else None,
            "metadata": {"otel_trace_id": trace_id},
        }
        header = {k: v for k, v in header.items() if v is not None}
    true_root = next((s for s in spans if not s.get("parentSpanId")), None)
    if trajectory_id is not None:
        header = {**header, "id": trajectory_id, "tenant_id": tenant_id}
        header["metadata"] = {**header.get("metadata", {}), "otel_trace_id": trace_id}
        if true_root is not None:
            header["started_at"] = _from_nanos(true_root.get("startTimeUnixNano")) or header.get("started_at")
            header["ended_at"] = header.get("ended_at") or _from_nanos(true_root.get("endTimeUnixNano"))
            if _is_error(true_root):
                header["status"] = "failed"
        header = {k: v for k, v in header.items() if v is not None}
    traj = Trajectory.model_validate(
        {**TrajectoryHeader.model_validate(header).model_dump(), "steps": [], "signals": []}
    )
    span_to_step: dict[str, str] = {}
    outside_parents: dict[str, str] = {}
    steps, signals = [], []
    if root:
        signals += _signals_of(by_id[root], None)
    for span in spans:
        sid = span["spanId"]
        a = attrs[sid]
        kind = op(sid)
        ancestors = agent_ancestors(sid)
        agent = attrs[ancestors[0]].get("gen_ai.agent.name") if ancestors else None
        step: Any = None
        if "evolvable.step" in a:
            step = _step_adapter().validate_json(a["evolvable.step"])
        elif kind in ("chat", "text_completion", "generate_content"):
            step = _llm_from_span(span, a, agent)
        elif kind == "execute_tool":
            step = _tool_from_span(span, a, agent)
        elif kind == "invoke_agent" and sid != root and ancestors:
            step = HandoffStep(
                from_agent=str(attrs[ancestors[0]].get("gen_ai.agent.name") or "unknown"),
                to_agent=str(a.get("gen_ai.agent.name") or "unknown"),
                agent=agent,
                **known_stamps(_from_nanos(span.get("startTimeUnixNano"))),
            )
        if step is None:
            continue
        if "evolvable.step" not in a:
            step.id = span_step_id(trace_id, sid)
        parent = span.get("parentSpanId")
        if step.parent_step_id is None and parent in span_to_step:
            step.parent_step_id = span_to_step[parent]
        elif step.parent_step_id is None and parent and parent not in by_id:
            outside_parents[step.id] = str(parent)
        span_to_step[sid] = step.id
        steps.append(step)
        signals += _signals_of(span, step.id)
    # Link tool calls to the llm_call that requested them, by tool_call_id.
    requested = {
        call.id: s.id
        for s in steps
        if isinstance(s, LLMCallStep) and s.response
        for call in (s.response.tool_calls or [])
    }
    for s in steps:
        if isinstance(s, ToolCallStep) and s.llm_step_id is None and s.tool_call_id in requested:
            s.llm_step_id = requested[s.tool_call_id]
    traj.steps = steps
    traj.signals = sorted(signals, key=lambda s: s.created_at)
    return TraceFragment(
        trace_id=trace_id,
        trajectory=Trajectory.model_validate(traj.model_dump()),
        has_root=true_root is not None,
        span_count=len(spans),
        outside_parents=outside_parents,
    )
