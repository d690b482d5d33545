"""Converters between ATDP and the formats around it. Pure functions; no I/O."""

from evolvable.protocol.converters.adp import to_adp
from evolvable.protocol.converters.openai_chat import from_openai_chat, llm_step_from_pair
from evolvable.protocol.converters.otel import TraceFragment, from_otel, merge_documents, to_otel, trace_fragments
from evolvable.protocol.converters.rl_samples import RLSample, trajectory_to_samples
from evolvable.protocol.converters.training import conversation, to_preference_pairs, to_sft_record, to_sft_records

__all__ = [
    "RLSample",
    "TraceFragment",
    "conversation",
    "from_openai_chat",
    "from_otel",
    "llm_step_from_pair",
    "merge_documents",
    "to_adp",
    "to_otel",
    "to_preference_pairs",
    "to_sft_record",
    "to_sft_records",
    "trace_fragments",
    "trajectory_to_samples",
]
