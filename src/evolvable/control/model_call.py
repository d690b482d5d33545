"""One chat call to a judge or evolver model, optionally with a JSON prefill.

A 135M model asked for JSON answers in prose. With a prefill the answer is started for it: the
request ends with an assistant message holding the JSON's opening (`{"score": `) and the model
continues it (vLLM's `continue_final_message`, which the embedded policy server implements), so the
first thing it writes is the value asked for. Larger models do not need it (OpenAI's API does not
accept it): `prefill` is off unless configured.
"""

from __future__ import annotations

from typing import Any


def chat(
    base_url: str,
    model: str,
    api_key: str,
    system: str,
    prompt: str,
    *,
    timeout_s: float,
    max_tokens: int,
    prefill: str | None = None,
) -> str:
    """The reply's text; with `prefill`, the prefill followed by the model's continuation of it."""
    from openai import OpenAI

    client = OpenAI(base_url=base_url, api_key=api_key, timeout=timeout_s, max_retries=1)
    messages: list[Any] = [{"role": "system", "content": system}, {"role": "user", "content": prompt}]
    extra: dict[str, Any] = {}
    if prefill:
        messages.append({"role": "assistant", "content": prefill})
        extra = {"continue_final_message": True, "add_generation_prompt": False}
    reply = client.chat.completions.create(
        model=model, messages=messages, temperature=0.0, max_tokens=max_tokens, extra_body=extra or None
    )
    text = reply.choices[0].message.content or ""
    return prefill + text if prefill and not text.startswith(prefill) else text
