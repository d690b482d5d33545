"""Evolvable: deployed LLM agents that learn from their own work, safely."""

__version__ = "0.1.0"
