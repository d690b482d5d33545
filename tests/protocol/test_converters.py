from __future__ import annotations

import json

import pytest

from evolvable.errors import ConversionError
from evolvable.protocol import LLMCallStep, Signal, SignalKind, ToolCallStep, Trajectory, TrajectoryStatus
from evolvable.protocol.converters import (
    from_openai_chat,
    from_otel,
    to_adp,
    to_otel,
    to_preference_pairs,
    to_sft_records,
    trajectory_to_samples,
)

# --------------------------------------------------------------------------- OpenAI chat logs


def test_openai_log_groups_interleaved_conversations_by_prefix(openai_log: list) -> None:
    trajectories = from_openai_chat(openai_log)
    assert len(trajectories) == 2
    support, other = trajectories
    assert [s.kind for s in support.steps] == ["llm_call", "tool_call", "tool_call", "llm_call"]
    assert support.task_input.startswith("Where is my order")
    assert other.steps[0].response.content == "I sent a reset link."


def test_openai_log_links_tool_results_to_the_requesting_call(openai_log: list) -> None:
    support = from_openai_chat(openai_log)[0]
    first_call = support.steps[0]
    assert isinstance(first_call, LLMCallStep)
    assert [c.id for c in first_call.response.tool_calls] == ["call_1", "call_2"]
    tools = support.tool_calls()
    assert [(t.tool_name, t.tool_call_id, t.llm_step_id) for t in tools] == [
        ("lookup_order", "call_1", first_call.id),
        ("lookup_customer", "call_2", first_call.id),
    ]
    assert tools[0].arguments == {"order_id": "A-1042"}
    assert "shipped" in tools[0].result
    assert first_call.usage.total_tokens == 160
    assert first_call.sampling == {"temperature": 0.2, "parallel_tool_calls": True}
    assert first_call.latency_ms == 812.5


def test_openai_log_with_session_ids_and_errors() -> None:
    records = [
        {
            "session_id": "s1",
            "request": {"messages": [{"role": "user", "content": "hi"}]},
            "response": {"error": {"message": "overloaded", "type": "server_error"}},
        },
        {
            "session_id": "s1",
            "request": {"messages": [{"role": "user", "content": "hi"}]},
            "response": {"id": "x", "choices": [{"message": {"role": "assistant", "content": "hello"}}]},
        },
    ]
    (t,) = from_openai_chat(records)
    assert t.id == "traj_s1"
    assert [s.status for s in t.steps] == ["error", "ok"]
    assert t.steps[0].error.message == "overloaded"
    assert t.status == TrajectoryStatus.failed


def test_openai_log_rejects_records_without_request() -> None:
    with pytest.raises(ConversionError, match="record 1"):
        from_openai_chat([{"response": {}}])


def test_openai_log_keeps_vllm_token_ids_and_logprobs() -> None:
    resp = {
        "id": "c",
        "prompt_token_ids": [1, 2, 3],
        "choices": [
            {
                "message": {"role": "assistant", "content": "ok"},
                "token_ids": [7, 8],
                "logprobs": {"content": [{"token": "o", "logprob": -0.5}, {"token": "k", "logprob": -0.25}]},
            }
        ],
    }
    (t,) = from_openai_chat([{"request": {"messages": [{"role": "user", "content": "x"}]}, "response": resp}])
    step = t.steps[0]
    assert step.prompt_token_ids == [1, 2, 3]
    assert step.choices[0].completion_token_ids == [7, 8]
    assert step.choices[0].logprobs == [-0.5, -0.25]


# --------------------------------------------------------------------------- OpenTelemetry


def test_otel_round_trip_is_lossless(trajectory: Trajectory) -> None:
    doc = json.loads(json.dumps(to_otel([trajectory])))
    (back,) = from_otel(doc)
    assert back == trajectory


def test_otel_export_uses_genai_conventions(trajectory: Trajectory) -> None:
    spans = to_otel([trajectory])["resourceSpans"][0]["scopeSpans"][0]["spans"]
    names = [s["name"] for s in spans]
    assert names[0] == "invoke_agent support"
    assert "chat smollm2-135m" in names and "execute_tool lookup_order" in names
    chat = next(s for s in spans if s["name"].startswith("chat"))
    keys = {a["key"] for a in chat["attributes"]}
    assert {
        "gen_ai.operation.name",
        "gen_ai.request.model",
        "gen_ai.response.id",
        "gen_ai.usage.input_tokens",
        "gen_ai.conversation.id",
    } <= keys
    tool = next(s for s in spans if s["name"].startswith("execute_tool"))
    assert tool["parentSpanId"] == chat["spanId"]
    assert any(e["name"] == "gen_ai.evaluation.result" for e in tool["events"])
    assert all(len(s["traceId"]) == 32 and len(s["spanId"]) == 16 for s in spans)


def _attr(key: str, value: object) -> dict:
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    return {"key": key, "value": {"stringValue": value if isinstance(value, str) else json.dumps(value)}}


def test_foreign_otel_trace_converts_from_standard_attributes() -> None:
    """A trace as a third-party GenAI instrumentation exports it: no evolvable.* attributes."""
    trace = "5b8efff798038103d269b633813fc60c"
    messages_in = [{"role": "user", "parts": [{"type": "text", "content": "Weather in Paris?"}]}]
    messages_out = [
        {
            "role": "assistant",
            "parts": [{"type": "tool_call", "id": "call_w", "name": "get_weather", "arguments": {"city": "Paris"}}],
            "finish_reason": "tool_calls",
        }
    ]
    doc = {
        "resourceSpans": [
            {
                "resource": {"attributes": [_attr("service.name", "travel-agent")]},
                "scopeSpans": [
                    {
                        "scope": {"name": "opentelemetry.instrumentation.openai_v2"},
                        "spans": [
                            {
                                "traceId": trace,
                                "spanId": "a000000000000001",
                                "name": "invoke_agent planner",
                                "startTimeUnixNano": "1700000000000000000",
                                "endTimeUnixNano": "1700000003000000000",
                                "attributes": [
                                    _attr("gen_ai.operation.name", "invoke_agent"),
                                    _attr("gen_ai.agent.name", "planner"),
                                    _attr("gen_ai.conversation.id", "conv-42"),
                                ],
                            },
                            {
                                "traceId": trace,
                                "spanId": "a000000000000002",
                                "parentSpanId": "a000000000000001",
                                "name": "chat gpt-4o",
                                "kind": "SPAN_KIND_CLIENT",
                                "startTimeUnixNano": "1700000000100000000",
                                "endTimeUnixNano": "1700000000900000000",
                                "attributes": [
                                    _attr("gen_ai.operation.name", "chat"),
                                    _attr("gen_ai.request.model", "gpt-4o"),
                                    _attr("gen_ai.response.id", "chatcmpl-7"),
                                    _attr("gen_ai.usage.input_tokens", 52),
                                    _attr("gen_ai.usage.output_tokens", 9),
                                    _attr("gen_ai.input.messages", messages_in),
                                    _attr("gen_ai.output.messages", messages_out),
                                ],
                            },
                            {
                                "traceId": trace,
                                "spanId": "a000000000000003",
                                "parentSpanId": "a000000000000001",
                                "name": "execute_tool get_weather",
                                "startTimeUnixNano": "1700000001000000000",
                                "endTimeUnixNano": "1700000001200000000",
                                "status": {"code": "STATUS_CODE_ERROR", "message": "timeout"},
                                "attributes": [
                                    _attr("gen_ai.operation.name", "execute_tool"),
                                    _attr("gen_ai.tool.name", "get_weather"),
                                    _attr("gen_ai.tool.call.id", "call_w"),
                                    _attr("error.type", "TimeoutError"),
                                ],
                                "events": [
                                    {
                                        "name": "gen_ai.evaluation.result",
                                        "timeUnixNano": "1700000002000000000",
                                        "attributes": [
                                            _attr("gen_ai.evaluation.name", "tool_checker"),
                                            {"key": "gen_ai.evaluation.score.value", "value": {"doubleValue": 0.0}},
                                            _attr("gen_ai.evaluation.score.label", "timeout"),
                                        ],
                                    }
                                ],
                            },
                            {
                                "traceId": trace,
                                "spanId": "a000000000000004",
                                "parentSpanId": "a000000000000001",
                                "name": "invoke_agent booker",
                                "startTimeUnixNano": "1700000002500000000",
                                "endTimeUnixNano": "1700000002900000000",
                                "attributes": [
                                    _attr("gen_ai.operation.name", "invoke_agent"),
                                    _attr("gen_ai.agent.name", "booker"),
                                ],
                            },
                        ],
                    }
                ],
            }
        ]
    }
    (t,) = from_otel(doc)
    assert t.id == "conv-42" and t.agent == "planner"
    assert [s.kind for s in t.steps] == ["llm_call", "tool_call", "handoff"]
    llm, tool, handoff = t.steps
    assert llm.model == "gpt-4o" and llm.usage.prompt_tokens == 52
    assert llm.request_messages[0].content == "Weather in Paris?"
    assert llm.response.tool_calls[0].function.name == "get_weather"
    assert json.loads(llm.response.tool_calls[0].function.arguments) == {"city": "Paris"}
    assert isinstance(tool, ToolCallStep)
    assert tool.status == "error" and tool.error_class == "TimeoutError" and tool.llm_step_id == llm.id
    assert handoff.from_agent == "planner" and handoff.to_agent == "booker"
    (sig,) = t.signals
    assert sig.step_id == tool.id and sig.value == 0.0 and sig.label == "timeout"


def test_from_otel_rejects_non_otlp() -> None:
    with pytest.raises(ConversionError, match="resourceSpans"):
        from_otel({"spans": []})


# --------------------------------------------------------------------------- ADP and training views


def test_adp_maps_actions_observations_and_rewards(trajectory: Trajectory) -> None:
    doc = to_adp(trajectory)
    classes = [c["class_"] for c in doc["content"]]
    assert classes[0] == "text_observation"
    assert "api_action" in classes and "message_action" in classes
    api = next(c for c in doc["content"] if c["class_"] == "api_action")
    assert api == {
        "class_": "api_action",
        "function": "lookup_order",
        "kwargs": {"order_id": "A-1042"},
        "description": None,
    }
    tool_obs = next(c for c in doc["content"] if c.get("name") == "lookup_order")
    assert tool_obs["reward"] == 1.0  # the process signal on the tool step
    assert doc["content"][-1]["reward"] == 1.0  # the outcome
    assert doc["details"]["harness_version"] == "h1-abc"


def test_sft_records_carry_versions_and_filter_by_outcome(trajectory: Trajectory) -> None:
    failed = trajectory.model_copy(deep=True)
    failed.id = "traj_failed"
    failed.signals = [Signal(kind=SignalKind.outcome, value=0.0)]
    records = to_sft_records([trajectory, failed], min_outcome=0.5)
    assert len(records) == 1
    rec = records[0]
    assert rec["messages"][-1] == {"role": "assistant", "content": "It shipped."}
    assert rec["metadata"]["harness_version"] == "h1-abc" and rec["metadata"]["policy_version"] == "pv-base"


def test_preference_pairs_from_runs_of_one_task(trajectory: Trajectory) -> None:
    worse = trajectory.model_copy(deep=True)
    worse.id = "traj_worse"
    worse.steps[-1].choices[0].message.content = "I cannot help."
    worse.signals = [Signal(kind=SignalKind.outcome, value=0.0)]
    (pair,) = to_preference_pairs([trajectory, worse])
    assert pair["chosen"] == [{"role": "assistant", "content": "It shipped."}]
    assert pair["rejected"] == [{"role": "assistant", "content": "I cannot help."}]
    assert pair["prompt"][-1]["role"] == "tool"


# --------------------------------------------------------------------------- RL samples


def test_rl_samples_merge_turns_and_mask_non_model_tokens(trajectory: Trajectory) -> None:
    (sample,) = trajectory_to_samples(trajectory)
    assert sample.input_ids == [1, 2, 3, 4, 11, 12, 13, 5, 6, 21, 22]
    assert sample.loss_mask == [0, 0, 0, 0, 1, 1, 1, 0, 0, 1, 1]
    assert sample.behaviour_logprobs == [0, 0, 0, 0, -0.1, -0.2, -0.3, 0, 0, -0.5, -0.05]
    assert sample.token_turn == [-1, -1, -1, -1, 0, 0, 0, -1, -1, 1, 1]
    assert sample.step_ids == ["step_llm1", "step_llm2"]
    assert sample.reward == 1.0 and sample.cluster == "order_status" and sample.harness_version == "h1-abc"


def test_rl_samples_mask_completion_tokens_that_redaction_replaced(trajectory: Trajectory) -> None:
    first = trajectory.steps[0].choices[0]
    first.redacted_token_spans = [(1, 2)]  # token 12 stands for a placeholder: never sampled, so its logprob
    # is no behaviour logprob even if a producer left one there
    (sample,) = trajectory_to_samples(trajectory)
    assert sample.input_ids == [1, 2, 3, 4, 11, 12, 13, 5, 6, 21, 22]
    assert sample.loss_mask == [0, 0, 0, 0, 1, 0, 1, 0, 0, 1, 1]
    assert sample.behaviour_logprobs == [0, 0, 0, 0, -0.1, 0, -0.3, 0, 0, -0.5, -0.05]
    assert sample.token_turn[5] == 0 and sample.num_generated == 4


def test_rl_samples_split_when_prompt_does_not_extend(trajectory: Trajectory) -> None:
    trajectory.steps[-1].prompt_token_ids = [9, 9]
    samples = trajectory_to_samples(trajectory)
    assert [s.input_ids for s in samples] == [[1, 2, 3, 4, 11, 12, 13], [9, 9, 21, 22]]


def test_rl_samples_drop_retried_calls_as_orphans(trajectory: Trajectory) -> None:
    retry = trajectory.steps[0].model_copy(deep=True)
    retry.id = "step_retry"
    trajectory.steps.insert(1, retry)
    (sample,) = trajectory_to_samples(Trajectory.model_validate(trajectory.model_dump()))
    assert sample.step_ids == ["step_retry", "step_llm2"]


def test_rl_samples_need_token_ids(trajectory: Trajectory) -> None:
    trajectory.steps[0].prompt_token_ids = None
    with pytest.raises(ConversionError, match="token ids"):
        trajectory_to_samples(trajectory)


def test_rl_samples_for_extra_choices(trajectory: Trajectory) -> None:
    from evolvable.protocol import ChatMessage, CompletionChoice

    trajectory.steps[-1].choices.append(
        CompletionChoice(
            index=1, message=ChatMessage(role="assistant", content="Other"), completion_token_ids=[31], logprobs=[-1.0]
        )
    )
    samples = trajectory_to_samples(trajectory)
    assert len(samples) == 2
    assert samples[1].input_ids == [1, 2, 3, 4, 11, 12, 13, 5, 6, 31]
    assert samples[1].loss_mask[-1] == 1 and sum(samples[1].loss_mask) == 1
