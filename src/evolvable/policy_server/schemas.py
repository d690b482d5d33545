"""Request bodies of the OpenAI-compatible API, with vLLM's extensions (`return_token_ids`, `stop_token_ids`, ...).

Unknown fields are accepted and ignored, as OpenAI-compatible servers do, so any client library works.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from evolvable.policy_server.sampling import SamplingParams

MAX_N = 16
MAX_TOP_LOGPROBS = 20


class _SamplingFields(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=1.0, ge=0.0, le=100.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    n: int = Field(default=1, ge=1, le=MAX_N)
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    stop: str | list[str] | None = None
    seed: int | None = None
    return_token_ids: bool = False
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    include_stop_str_in_output: bool = False

    @field_validator("stop")
    @classmethod
    def _stops_are_not_empty(cls, value: str | list[str] | None) -> str | list[str] | None:
        stops = [value] if isinstance(value, str) else value or []
        if any(not s for s in stops):
            raise ValueError("stop strings must not be empty")
        if len(stops) > 16:
            raise ValueError("at most 16 stop strings")
        return value

    def sampling_params(self, choice_index: int, top_logprobs: int, max_tokens: int | None) -> SamplingParams:
        """Per-choice parameters; with a seed, choice i samples with seed + i so `n` choices differ reproducibly."""
        stops = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        return SamplingParams(
            max_tokens=max_tokens,  # type: ignore[arg-type]  # None -> the engine's default, capped by context
            temperature=self.temperature,
            top_p=self.top_p,
            seed=None if self.seed is None else self.seed + choice_index,
            stop=stops,
            stop_token_ids=list(self.stop_token_ids or []),
            top_logprobs=top_logprobs,
            ignore_eos=self.ignore_eos,
            include_stop_str_in_output=self.include_stop_str_in_output,
        )

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.get("include_usage"))


class ChatCompletionRequest(_SamplingFields):
    messages: list[dict[str, Any]] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=MAX_TOP_LOGPROBS)
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    """vLLM's prefill: the last message is an assistant message the model continues (constrained exploration)."""

    @model_validator(mode="after")
    def _prefill_is_consistent(self) -> ChatCompletionRequest:
        if self.continue_final_message:
            if self.add_generation_prompt:
                raise ValueError("continue_final_message needs add_generation_prompt=false")
            if self.messages[-1].get("role") != "assistant":
                raise ValueError("continue_final_message needs the last message to be the assistant's")
        return self

    @property
    def effective_max_tokens(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


class CompletionRequest(_SamplingFields):
    prompt: str | list[str] | list[int] | list[list[int]]
    logprobs: int | None = Field(default=None, ge=0, le=MAX_TOP_LOGPROBS)
    echo: bool = False
    max_tokens: int | None = Field(default=16, ge=1)

    def prompts(self) -> list[str | list[int]]:
        """The prompts as a list of strings or token-id lists (the API accepts a batch of either)."""
        prompt = self.prompt
        if isinstance(prompt, str):
            return [prompt]
        if not prompt:
            raise ValueError("the prompt is empty")
        if all(isinstance(p, int) for p in prompt):
            return [list(prompt)]  # type: ignore[arg-type]
        return list(prompt)  # type: ignore[arg-type]


class LoadLoraAdapterRequest(BaseModel):
    lora_name: str = Field(min_length=1)
    lora_path: str = Field(min_length=1)
    load_inplace: bool = False
    """Replace an adapter of the same name (vLLM's flag), for publishing a new version under one name."""


class UnloadLoraAdapterRequest(BaseModel):
    lora_name: str = Field(min_length=1)
    lora_int_id: int | None = None
