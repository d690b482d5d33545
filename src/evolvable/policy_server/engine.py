"""The inference engine: a request queue feeding step-level continuous batching over one KV cache.

One background thread owns the model. Each iteration it admits waiting requests (on CPU prefilled one by
one, so no compute goes to padding; on an accelerator, where a pass costs about the same for one prompt or
many, together in left-padded passes; then merged into the running batch's cache with left padding), runs one
decode step for every running sequence at once, samples each row with that request's own generator,
and retires finished rows. A request never waits for another request to finish, and a seeded request
samples the same tokens whatever shares its batch (up to float rounding of batched matmuls).

LoRA adapters are PEFT adapters on the one base model; rows of one batch may use different adapters
(PEFT mixed-batch inference via `adapter_names`). Loads and unloads run on the engine thread between
steps; an unload waits until no running sequence uses the adapter.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import logging
import queue
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

import torch
from transformers import BatchEncoding, DynamicCache, PreTrainedModel, PreTrainedTokenizerBase

from evolvable.errors import HTTPError, InvalidRequest
from evolvable.policy_server.detokenize import TokenText, find_stop, safe_text_end
from evolvable.policy_server.prefix_cache import PrefixCache
from evolvable.policy_server.sampling import SamplingParams, sample_rows_on_device, sample_token
from evolvable.telemetry.metrics import DECODE_BATCH_SIZE

__all__ = ["AdapterError", "Engine", "EngineStats", "GenerationResult", "RequestError", "StepUpdate"]

BASE_ADAPTER = "__base__"
UNKNOWN_ADAPTER = "unknown_adapter"
"""Finish reason of a request whose adapter was unloaded before it started."""
logger = logging.getLogger(__name__)


class RequestError(InvalidRequest):
    """A request the engine cannot serve (too long, bad parameters): HTTP 400."""


class AdapterError(HTTPError):
    """An adapter cannot be loaded or unloaded: HTTP 400 (or 404 for an unknown name), typed as vLLM does."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message, status=status, error_type="NotFoundError" if status == 404 else "BadRequestError")


@dataclass
class StepUpdate:
    """What one engine step produced for one request (streamed to the caller)."""

    token_ids: list[int]
    logprobs: list[float]
    top_logprobs: list[list[tuple[int, float]]]
    text_delta: str
    finish_reason: str | None = None


@dataclass
class GenerationResult:
    prompt_token_ids: list[int]
    token_ids: list[int]
    logprobs: list[float]
    top_logprobs: list[list[tuple[int, float]]]
    text: str
    finish_reason: str


@dataclass
class EngineStats:
    """Counters for tests and benchmarks (no timing assertions needed to see batching happen)."""

    requests_submitted: int = 0
    requests_finished: int = 0
    prefill_calls: int = 0
    prefill_tokens: int = 0
    decode_steps: int = 0
    batched_decode_steps: int = 0
    """Decode steps that advanced more than one sequence at once."""
    max_decode_batch: int = 0
    requests_cancelled: int = 0
    """Requests whose caller went away (a closed stream) before they finished."""
    generated_tokens: int = 0
    prefix_cache_hits: int = 0
    """Prefills that started from cached states of an earlier prompt's beginning."""
    prefix_cached_tokens: int = 0
    """Prompt tokens those prefills did not have to compute (`prefill_tokens` counts only computed ones)."""


@dataclass
class _Sequence:
    request_id: int
    prompt_token_ids: list[int]
    params: SamplingParams
    adapter: str | None
    on_update: Callable[[StepUpdate], None]
    generator: torch.Generator
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    top_logprobs: list[list[tuple[int, float]]] = field(default_factory=list)
    streamed_chars: int = 0
    next_position: int = 0
    cancelled: bool = False
    finish_reason: str | None = None
    final_text: str | None = None


class Engine:
    """Continuous-batching generation over a causal LM, with per-request sampling and LoRA adapters."""

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        *,
        model_name: str = "smollm2-135m",
        max_batch: int = 16,
        default_max_tokens: int = 1024,
        logprobs_mode: Literal["raw", "processed"] = "raw",
        prefix_cache_mb: int = 512,
        batch_prefill: bool | None = None,
    ) -> None:
        """`logprobs_mode`: "raw" reports log-probabilities of the unmodified model distribution (temperature 1,
        no top-p; what a trainer recomputes), "processed" those of the distribution each token was drawn from.
        `prefix_cache_mb`: memory for automatic prefix caching (see `prefix_cache`); 0 turns it off.
        `batch_prefill`: prefill the prompts admitted together in one left-padded forward pass, recomputing
        any cached prefix (default: on an accelerator, where a pass costs about the same for one prompt or
        many; off on CPU, where compute is the cost). A prompt admitted alone still uses the prefix cache."""
        if logprobs_mode not in ("raw", "processed"):
            raise ValueError(f"logprobs_mode must be 'raw' or 'processed', not {logprobs_mode!r}")
        self.logprobs_mode = logprobs_mode
        self.model_name = model_name
        self.tokenizer = tokenizer
        self.max_batch = max_batch
        self.default_max_tokens = default_max_tokens
        self.max_context = int(getattr(model.config, "max_position_embeddings", 2048))
        self.stats = EngineStats()
        self._base = model.eval()  # type: ignore[no-untyped-call]  # transformers' eval() override is unannotated
        self.device = next(model.parameters()).device
        """Where the model's weights live; every tensor the engine feeds it is made there."""
        self.batch_prefill = self.device.type != "cpu" if batch_prefill is None else batch_prefill
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self._pad_id = int(pad) if pad is not None else 0
        self._peft: Any = None
        self._adapters: dict[str, str] = {}
        self._eos_ids = self._collect_eos_ids(model, tokenizer)
        self._prefix_cache = PrefixCache(prefix_cache_mb << 20) if prefix_cache_mb > 0 else None
        self.token_text = TokenText(tokenizer)
        self._waiting: queue.SimpleQueue[_Sequence] = queue.SimpleQueue()
        self._commands: list[tuple[Callable[[], Any], concurrent.futures.Future[Any], str | None]] = []
        self._commands_lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._ids = itertools.count(1)
        self._thread: threading.Thread | None = None
        # The running batch: rows of `_running` align with rows of the cache and the attention mask.
        self._running: list[_Sequence] = []
        self._cache: Any = None
        self._mask: torch.Tensor | None = None
        self._last_tokens: torch.Tensor | None = None

    # ----------------------------------------------------------------- lifecycle
    def start(self) -> Engine:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="evolvable-engine", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None

    def __enter__(self) -> Engine:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ----------------------------------------------------------------- prompts
    def chat_prompt_ids(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        add_generation_prompt: bool = True,
        continue_final_message: bool = False,
    ) -> list[int]:
        """Token ids of a chat prompt under the tokenizer's own chat template, ready for the assistant's turn
        (or, with `continue_final_message`, inside the last assistant message, as vLLM does for prefills).
        Tool definitions reach the template, which uses them only if it knows how (SmolLM2's ignores them)."""
        template_tools: list[dict[Any, Any] | Callable[..., Any]] | None = [*tools] if tools else None
        try:
            encoded = self.tokenizer.apply_chat_template(
                messages,
                tools=template_tools,
                add_generation_prompt=add_generation_prompt,
                continue_final_message=continue_final_message,
                tokenize=True,
                return_dict=True,
            )
        except Exception as err:  # a template error is the caller's malformed conversation
            raise RequestError(f"cannot apply the chat template to these messages: {err}") from err
        # (return_dict=True: a BatchEncoding; the stubs also allow the tokenize=False string)
        return list(cast(BatchEncoding, encoded)["input_ids"])

    def text_prompt_ids(self, prompt: str) -> list[int]:
        return list(self.tokenizer(prompt, add_special_tokens=False)["input_ids"])

    # ----------------------------------------------------------------- load, for /metrics

    @property
    def queue_depth(self) -> int:
        """Requests submitted and not yet admitted to the running batch."""
        return self._waiting.qsize()

    @property
    def batch_size(self) -> int:
        """Sequences in the running batch."""
        return len(self._running)

    # ----------------------------------------------------------------- adapters

    @property
    def adapters(self) -> dict[str, str]:
        """Loaded LoRA adapters: name -> path."""
        return dict(self._adapters)

    def load_adapter(self, name: str, path: str, *, replace: bool = False) -> None:
        """Load a PEFT LoRA adapter saved with `save_pretrained` (blocks until loaded between two steps)."""
        if not name or name == BASE_ADAPTER or name == self.model_name:
            raise AdapterError(f"invalid adapter name {name!r}")
        if not (Path(path) / "adapter_config.json").is_file():
            raise AdapterError(f"no PEFT adapter (adapter_config.json) at lora_path {path!r}", 404)
        if not any((Path(path) / f).is_file() for f in ("adapter_model.safetensors", "adapter_model.bin")):
            raise AdapterError(f"no adapter weights (adapter_model.safetensors) at lora_path {path!r}", 400)
        if name in self._adapters and not replace:
            raise AdapterError(f"the adapter {name!r} is already loaded", 400)
        self._run_command(lambda: self._load_adapter_now(name, path, replace), waits_for=name if replace else None)

    def unload_adapter(self, name: str) -> None:
        if name not in self._adapters:
            raise AdapterError(f"the adapter {name!r} is not loaded", 404)
        self._run_command(lambda: self._unload_adapter_now(name), waits_for=name)

    async def aload_adapter(self, name: str, path: str, *, replace: bool = False) -> None:
        await asyncio.to_thread(self.load_adapter, name, path, replace=replace)

    async def aunload_adapter(self, name: str) -> None:
        await asyncio.to_thread(self.unload_adapter, name)

    def _run_command(self, action: Callable[[], Any], waits_for: str | None) -> Any:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        with self._commands_lock:
            self._commands.append((action, future, waits_for))
        self._wake.set()
        if self._thread is None:  # not started: run inline (tests, scripts)
            self._run_ready_commands()
        return future.result()

    def _load_adapter_now(self, name: str, path: str, replace: bool) -> None:
        from peft import PeftModel

        if name in self._adapters:  # checked again here: two loads of one name may have raced
            if not replace:
                raise AdapterError(f"the adapter {name!r} is already loaded", 400)
            self._unload_adapter_now(name)
        try:
            if self._peft is None:
                self._peft = PeftModel.from_pretrained(self._base, path, adapter_name=name, is_trainable=False)
            else:
                self._peft.load_adapter(path, adapter_name=name, is_trainable=False)
        except Exception as err:
            with contextlib.suppress(Exception):
                if self._peft is not None and name in self._peft.peft_config:
                    self._peft.delete_adapter(name)
                elif self._peft is None:
                    _strip_tuner_layers(self._base)  # a failed first load may have injected layers already
            raise AdapterError(f"cannot load the adapter at {path!r} onto {self.model_name}: {err}") from err
        self._peft.eval()
        self._adapters[name] = str(path)
        self._forget_prefixes(name)

    def _unload_adapter_now(self, name: str) -> None:
        if name not in self._adapters:
            raise AdapterError(f"the adapter {name!r} is not loaded", 404)
        if len(self._adapters) == 1:  # the last one: strip the LoRA layers, back to the plain base model
            self._base = self._peft.unload()
            self._peft = None
        else:
            self._peft.set_adapter(next(n for n in self._adapters if n != name))  # rows pick adapters per call
            self._peft.delete_adapter(name)
        del self._adapters[name]
        self._forget_prefixes(name)

    def _forget_prefixes(self, adapter: str) -> None:
        if self._prefix_cache is not None:
            self._prefix_cache.drop_scope(adapter)

    # ----------------------------------------------------------------- submitting
    def check_request(self, prompt_token_ids: list[int], adapter: str | None = None) -> None:
        """Raise RequestError/AdapterError for a request that cannot be served (before a stream starts)."""
        if not prompt_token_ids:
            raise RequestError("the prompt is empty")
        if len(prompt_token_ids) >= self.max_context:
            raise RequestError(
                f"the prompt has {len(prompt_token_ids)} tokens; this model's context is {self.max_context} tokens"
            )
        vocabulary = len(self.tokenizer)
        if any(not 0 <= t < vocabulary for t in prompt_token_ids):
            raise RequestError(f"prompt token ids must lie in [0, {vocabulary})")
        if adapter is not None and adapter not in self._adapters:
            raise AdapterError(f"the adapter {adapter!r} is not loaded", 404)

    def submit(
        self,
        prompt_token_ids: list[int],
        params: SamplingParams,
        on_update: Callable[[StepUpdate], None],
        adapter: str | None = None,
    ) -> Callable[[], None]:
        """Queue a request; `on_update` is called from the engine thread. Returns a cancel function."""
        self.check_request(prompt_token_ids, adapter)
        room = self.max_context - len(prompt_token_ids)
        params.max_tokens = min(params.max_tokens if params.max_tokens is not None else self.default_max_tokens, room)
        sequence = _Sequence(
            request_id=next(self._ids),
            prompt_token_ids=list(prompt_token_ids),
            params=params,
            adapter=adapter,
            on_update=on_update,
            generator=params.make_generator(),
        )
        self.stats.requests_submitted += 1
        self._waiting.put(sequence)
        self._wake.set()

        def cancel() -> None:
            sequence.cancelled = True
            self._wake.set()

        return cancel

    async def stream(
        self, prompt_token_ids: list[int], params: SamplingParams, adapter: str | None = None
    ) -> AsyncIterator[StepUpdate]:
        """Async iterator of step updates; cancelling the consumer cancels the request."""
        loop = asyncio.get_running_loop()
        updates: asyncio.Queue[StepUpdate] = asyncio.Queue()

        def on_update(update: StepUpdate) -> None:
            loop.call_soon_threadsafe(updates.put_nowait, update)

        cancel = self.submit(prompt_token_ids, params, on_update, adapter)
        try:
            while True:
                update = await updates.get()
                yield update
                if update.finish_reason is not None:
                    return
        finally:
            cancel()

    async def generate(
        self, prompt_token_ids: list[int], params: SamplingParams, adapter: str | None = None
    ) -> GenerationResult:
        """The whole completion at once. The engine thread wakes the event loop once, at the end, not once
        per token as a stream does: with many requests those wake-ups competed with the engine for the GIL."""
        loop = asyncio.get_running_loop()
        finished: asyncio.Future[list[StepUpdate]] = loop.create_future()
        updates: list[StepUpdate] = []

        def on_update(update: StepUpdate) -> None:
            updates.append(update)
            if update.finish_reason is not None:
                with contextlib.suppress(RuntimeError):  # the caller's event loop has closed: nobody waits
                    loop.call_soon_threadsafe(_resolve, finished, updates)

        cancel = self.submit(prompt_token_ids, params, on_update, adapter)
        try:
            return _collect(prompt_token_ids, await finished)
        finally:
            cancel()  # a no-op once finished; stops the sequence if the caller went away first

    def generate_blocking(
        self, prompt_token_ids: list[int], params: SamplingParams, adapter: str | None = None
    ) -> GenerationResult:
        """Synchronous convenience for scripts: submit and wait (the engine thread must be running)."""
        done = threading.Event()
        updates: list[StepUpdate] = []

        def on_update(update: StepUpdate) -> None:
            updates.append(update)
            if update.finish_reason is not None:
                done.set()

        self.submit(prompt_token_ids, params, on_update, adapter)
        done.wait()
        return _collect(prompt_token_ids, updates)

    # ----------------------------------------------------------------- the loop
    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            try:
                self._run_ready_commands()
                self._admit()
                if not self._running:
                    self._wake.wait(timeout=0.5)
                    continue
                self._decode_step()
            except Exception as err:  # never let one bad batch kill the server: fail the batch, go on
                self._fail_running(err)

    def _run_ready_commands(self) -> None:
        with self._commands_lock:
            busy = {s.adapter for s in self._running}
            ready = [c for c in self._commands if c[2] is None or c[2] not in busy]
            self._commands = [c for c in self._commands if c not in ready]
        for action, future, _ in ready:
            try:
                future.set_result(action())
            except Exception as err:
                future.set_exception(err)

    def _forward_model(self) -> Any:
        return self._peft if self._peft is not None else self._base

    def _adapter_kwargs(self, sequences: list[_Sequence]) -> dict[str, Any]:
        if self._peft is None:
            return {}
        return {"adapter_names": [s.adapter or BASE_ADAPTER for s in sequences]}

    def _admit(self) -> None:
        blocked = self._adapters_being_changed()
        deferred: list[_Sequence] = []
        together: list[_Sequence] = []
        while len(self._running) + len(together) < self.max_batch:
            try:
                sequence = self._waiting.get_nowait()
            except queue.Empty:
                break
            if sequence.cancelled:  # its caller left while it waited
                self.stats.requests_finished += 1
                self.stats.requests_cancelled += 1
                continue
            if sequence.adapter in blocked:
                deferred.append(sequence)
                continue
            if sequence.adapter is not None and sequence.adapter not in self._adapters:
                self._finish(sequence, UNKNOWN_ADAPTER, text="")  # unloaded while it waited
                continue
            if self.batch_prefill:
                together.append(sequence)
                continue
            self._prefill_alone(sequence)
        if len(together) == 1:  # alone, it may start from cached prefix states
            self._prefill_alone(together[0])
        # Several at once: one pass for all, recomputing shared prefixes, costs less than a pass each.
        for group in _prefill_groups(together) if len(together) > 1 else []:
            try:
                self._prefill_together(group)
            except Exception:
                if group[0] in self._running:
                    raise
                logger.exception("prefill failed for requests %s", [s.request_id for s in group])
                for sequence in group:
                    self._finish(sequence, "error", text="")
        for sequence in deferred:
            self._waiting.put(sequence)
        self._retire_finished()

    def _prefill_alone(self, sequence: _Sequence) -> None:
        try:
            self._prefill(sequence)
        except Exception:
            if sequence in self._running:  # the batch's cache may be inconsistent: fail the batch
                raise
            logger.exception("prefill failed for request %s", sequence.request_id)
            self._finish(sequence, "error", text="")

    def _adapters_being_changed(self) -> set[str | None]:
        with self._commands_lock:
            return {c[2] for c in self._commands if c[2] is not None}

    @torch.inference_mode()
    def _prefill(self, sequence: _Sequence) -> None:
        prompt = sequence.prompt_token_ids
        cached = self._prefix_cache.lookup(prompt, sequence.adapter) if self._prefix_cache is not None else None
        start = cached.length if cached is not None else 0
        ids = torch.tensor([prompt[start:]], dtype=torch.long, device=self.device)
        output = self._forward_model()(
            input_ids=ids,
            attention_mask=torch.ones((1, len(prompt)), dtype=torch.long, device=self.device),
            position_ids=torch.arange(start, len(prompt), device=self.device).unsqueeze(0),
            past_key_values=DynamicCache(cached.layers) if cached is not None else None,
            use_cache=True,
            logits_to_keep=1,
            **self._adapter_kwargs([sequence]),
        )
        self.stats.prefill_calls += 1
        self.stats.prefill_tokens += ids.shape[1]
        if cached is not None:
            self.stats.prefix_cache_hits += 1
            self.stats.prefix_cached_tokens += start
        cache = output.past_key_values
        if self._prefix_cache is not None:  # fresh tensors: later steps concatenate, never write in place
            self._prefix_cache.insert(prompt, sequence.adapter, [(layer.keys, layer.values) for layer in cache.layers])
        sequence.next_position = len(prompt)
        self._merge([sequence], cache, torch.ones((1, len(prompt)), dtype=torch.long, device=self.device))
        self._sample_rows([sequence], output.logits[:, -1, :])

    @torch.inference_mode()
    def _prefill_together(self, group: list[_Sequence]) -> None:
        """Prefill several prompts in one forward pass, left-padded to the longest (rows as in decoding)."""
        lengths = [len(s.prompt_token_ids) for s in group]
        width = max(lengths)
        ids = [[self._pad_id] * (width - n) + s.prompt_token_ids for s, n in zip(group, lengths, strict=True)]
        mask = torch.tensor([[0] * (width - n) + [1] * n for n in lengths], dtype=torch.long, device=self.device)
        output = self._forward_model()(
            input_ids=torch.tensor(ids, dtype=torch.long, device=self.device),
            attention_mask=mask,
            position_ids=(mask.cumsum(dim=1) - 1).clamp(min=0),
            use_cache=True,
            logits_to_keep=1,
            **self._adapter_kwargs(group),
        )
        self.stats.prefill_calls += 1
        self.stats.prefill_tokens += sum(lengths)
        cache = output.past_key_values
        for row, (sequence, length) in enumerate(zip(group, lengths, strict=True)):
            if self._prefix_cache is not None:
                first = width - length
                layers = [
                    (layer.keys[row : row + 1, :, first:].clone(), layer.values[row : row + 1, :, first:].clone())
                    for layer in cache.layers
                ]
                self._prefix_cache.insert(sequence.prompt_token_ids, sequence.adapter, layers)
            sequence.next_position = length
        self._merge(group, cache, mask)
        self._sample_rows(group, output.logits[:, -1, :])

    def _merge(self, sequences: list[_Sequence], cache: Any, new_mask: torch.Tensor) -> None:
        """Append prefilled sequences (their cache rows and left-padded mask) to the running batch,
        left-padding whichever cache is shorter."""
        length = new_mask.shape[1]
        new_tokens = torch.zeros((len(sequences), 1), dtype=torch.long, device=self.device)
        if not self._running:
            self._cache, self._mask = cache, new_mask
            self._running = list(sequences)
            self._last_tokens = new_tokens
            return
        assert self._mask is not None and self._last_tokens is not None
        current = self._mask.shape[1]
        target = max(current, length)
        for old_layer, new_layer in zip(self._cache.layers, cache.layers, strict=True):
            old_keys, old_values = _left_pad(old_layer.keys, target), _left_pad(old_layer.values, target)
            new_keys, new_values = _left_pad(new_layer.keys, target), _left_pad(new_layer.values, target)
            old_layer.keys = torch.cat([old_keys, new_keys], dim=0)
            old_layer.values = torch.cat([old_values, new_values], dim=0)
        self._mask = torch.cat(
            [
                torch.nn.functional.pad(self._mask, (target - current, 0)),
                torch.nn.functional.pad(new_mask, (target - length, 0)),
            ]
        )
        self._running.extend(sequences)
        self._last_tokens = torch.cat([self._last_tokens, new_tokens])

    @torch.inference_mode()
    def _decode_step(self) -> None:
        assert self._mask is not None and self._last_tokens is not None
        rows = list(self._running)
        self._last_tokens = torch.tensor([[s.token_ids[-1]] for s in rows], dtype=torch.long, device=self.device)
        positions = torch.tensor([[s.next_position] for s in rows], dtype=torch.long, device=self.device)
        ones = torch.ones((len(rows), 1), dtype=torch.long, device=self.device)
        self._mask = torch.cat([self._mask, ones], dim=1)
        output = self._forward_model()(
            input_ids=self._last_tokens,
            attention_mask=self._mask,
            position_ids=positions,
            past_key_values=self._cache,
            use_cache=True,
            **self._adapter_kwargs(rows),
        )
        self._cache = output.past_key_values
        for sequence in rows:
            sequence.next_position += 1
        self.stats.decode_steps += 1
        DECODE_BATCH_SIZE.observe(len(rows))
        self.stats.max_decode_batch = max(self.stats.max_decode_batch, len(rows))
        if len(rows) > 1:
            self.stats.batched_decode_steps += 1
        self._sample_rows(rows, output.logits[:, -1, :])
        self._retire_finished()

    def _sample_rows(self, rows: list[_Sequence], logits: torch.Tensor) -> None:
        if self.device.type != "cpu":
            self._sample_rows_on_device(rows, logits)
            return
        raw_logprobs = torch.log_softmax(logits.float(), dim=-1)
        for row, sequence in enumerate(rows):
            if sequence.finish_reason is not None:
                continue
            if sequence.cancelled:
                sequence.finish_reason = "abort"
                continue
            token, processed_logprob = sample_token(logits[row], sequence.params, sequence.generator)
            top: list[tuple[int, float]] = []
            if sequence.params.top_logprobs > 0:
                values, indices = torch.topk(raw_logprobs[row], sequence.params.top_logprobs)
                top = list(zip(indices.tolist(), values.tolist(), strict=True))
            logprob = processed_logprob if self.logprobs_mode == "processed" else float(raw_logprobs[row, token])
            self._append_token(sequence, token, logprob, top)

    def _sample_rows_on_device(self, rows: list[_Sequence], logits: torch.Tensor) -> None:
        """The whole batch at once on the accelerator, with one copy back to the host per step: per-row
        sampling there pays a device round trip per row and token, which cost more than the forward pass."""
        live: list[int] = []
        for row, sequence in enumerate(rows):
            if sequence.finish_reason is not None:
                continue
            if sequence.cancelled:
                sequence.finish_reason = "abort"
                continue
            live.append(row)
        if not live:
            return
        chosen = [rows[row] for row in live]
        draws = sample_rows_on_device(
            logits[live] if len(live) < len(rows) else logits,
            [s.params for s in chosen],
            [s.generator for s in chosen],
        )
        for sequence, (token, processed, raw, top) in zip(chosen, draws, strict=True):
            logprob = processed if self.logprobs_mode == "processed" else raw
            self._append_token(sequence, token, logprob, top)

    def _append_token(self, sequence: _Sequence, token: int, logprob: float, top: list[tuple[int, float]]) -> None:
        params = sequence.params
        sequence.token_ids.append(token)
        sequence.logprobs.append(logprob)
        sequence.top_logprobs.append(top)
        self.stats.generated_tokens += 1
        # (one sequence's ids decode to one string; the stubs also allow a batch's list)
        text = cast(str, self.tokenizer.decode(sequence.token_ids, skip_special_tokens=True))
        finish: str | None = None
        final_text: str | None = None
        if params.stop:
            hit = find_stop(text, params.stop, sequence.streamed_chars)
            if hit is not None:
                index, stop = hit
                finish, final_text = "stop", text[: index + (len(stop) if params.include_stop_str_in_output else 0)]
        if finish is None and (token in params.stop_token_ids or (token in self._eos_ids and not params.ignore_eos)):
            finish, final_text = "stop", text
        if finish is None and len(sequence.token_ids) >= params.max_tokens:
            finish, final_text = "length", text
        if finish is None:
            end = safe_text_end(text, params.stop)
            delta = text[sequence.streamed_chars : end] if end > sequence.streamed_chars else ""
            sequence.streamed_chars += len(delta)
            sequence.on_update(StepUpdate([token], [logprob], [top], delta))
            return
        assert final_text is not None
        sequence.finish_reason = finish
        sequence.final_text = final_text
        delta = final_text[sequence.streamed_chars :]
        sequence.streamed_chars = len(final_text)
        sequence.on_update(StepUpdate([token], [logprob], [top], delta, finish))
        self.stats.requests_finished += 1

    def _finish(self, sequence: _Sequence, reason: str, text: str) -> None:
        sequence.finish_reason = reason
        sequence.on_update(StepUpdate([], [], [], text, reason))
        self.stats.requests_finished += 1

    def _retire_finished(self) -> None:
        for sequence in self._running:
            if sequence.finish_reason == "abort":
                self.stats.requests_cancelled += 1
                self._finish(sequence, "abort", "")
        keep = [i for i, s in enumerate(self._running) if s.finish_reason is None]
        if len(keep) == len(self._running):
            return
        self._cache_finished_rows()
        if not keep:
            self._running, self._cache, self._mask, self._last_tokens = [], None, None, None
            return
        assert self._mask is not None
        index = torch.tensor(keep, dtype=torch.long, device=self.device)
        self._running = [self._running[i] for i in keep]
        self._mask = self._mask[index]
        used = torch.nonzero(self._mask.any(dim=0)).flatten()
        start = int(used[0]) if used.numel() else 0
        self._mask = self._mask[:, start:]
        for layer in self._cache.layers:
            layer.keys = layer.keys[index, :, start:]
            layer.values = layer.values[index, :, start:]

    def _cache_finished_rows(self) -> None:
        """Keep the states of finished sequences: an agent's next turn starts with this one's tokens."""
        if self._prefix_cache is None or self._cache is None or self._mask is None:
            return
        valid = self._mask.sum(dim=1).tolist()  # rows are left-padded: each row's states are its last columns
        width = self._mask.shape[1]
        for row, sequence in enumerate(self._running):
            if sequence.finish_reason not in ("stop", "length"):
                continue
            ids = sequence.prompt_token_ids + sequence.token_ids[:-1]  # the last sampled token was never fed
            if valid[row] != len(ids):
                continue
            first = width - len(ids)
            layers = [
                (layer.keys[row : row + 1, :, first:].clone(), layer.values[row : row + 1, :, first:].clone())
                for layer in self._cache.layers
            ]
            self._prefix_cache.insert(ids, sequence.adapter, layers)

    def _fail_running(self, err: Exception) -> None:
        logger.error("generation step failed; failing %d running requests", len(self._running), exc_info=err)
        for sequence in self._running:
            if sequence.finish_reason is None:
                self._finish(sequence, "error", "")
        self._running, self._cache, self._mask, self._last_tokens = [], None, None, None

    @staticmethod
    def _collect_eos_ids(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> set[int]:
        ids: set[int] = set()
        for source in (getattr(model, "generation_config", None), model.config):
            value = getattr(source, "eos_token_id", None) if source is not None else None
            if isinstance(value, int):
                ids.add(value)
            elif isinstance(value, list):
                ids.update(int(v) for v in value)
        if tokenizer.eos_token_id is not None:
            ids.add(int(tokenizer.eos_token_id))
        return ids


def _strip_tuner_layers(model: torch.nn.Module) -> None:
    """Put every PEFT-wrapped layer's original layer back (undo a partial adapter injection)."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    for name, module in list(model.named_modules()):
        if isinstance(module, BaseTunerLayer) and name:
            parent_name, _, child = name.rpartition(".")
            parent = model.get_submodule(parent_name) if parent_name else model
            setattr(parent, child, module.get_base_layer())


PREFILL_TOKENS_PER_PASS = 8192
"""Padded prompt tokens one batched prefill may hold: bounds the activation memory of one pass."""


def _prefill_groups(sequences: list[_Sequence]) -> list[list[_Sequence]]:
    """Prompts of similar length together (little padding), each group within `PREFILL_TOKENS_PER_PASS`."""
    groups: list[list[_Sequence]] = []
    for sequence in sorted(sequences, key=lambda s: len(s.prompt_token_ids)):
        group = groups[-1] if groups else None
        # Sorted by length, so this sequence is the group's longest: the group's padded size is len x rows.
        if group is not None and len(sequence.prompt_token_ids) * (len(group) + 1) <= PREFILL_TOKENS_PER_PASS:
            group.append(sequence)
        else:
            groups.append([sequence])
    return groups


def _left_pad(tensor: torch.Tensor, length: int) -> torch.Tensor:
    missing = length - tensor.shape[-2]
    if missing <= 0:
        return tensor
    return torch.nn.functional.pad(tensor, (0, 0, missing, 0))


def _resolve(future: asyncio.Future[list[StepUpdate]], updates: list[StepUpdate]) -> None:
    if not future.done():
        future.set_result(updates)


def _collect(prompt_token_ids: list[int], updates: list[StepUpdate]) -> GenerationResult:
    finish = updates[-1].finish_reason if updates else "error"
    return GenerationResult(
        prompt_token_ids=list(prompt_token_ids),
        token_ids=[t for u in updates for t in u.token_ids],
        logprobs=[lp for u in updates for lp in u.logprobs],
        top_logprobs=[top for u in updates for top in u.top_logprobs],
        text="".join(u.text_delta for u in updates),
        finish_reason=finish or "error",
    )
