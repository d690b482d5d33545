"""Embedded OpenAI-compatible policy server: transformers + PEFT, batched, with engine token ids and logprobs."""
