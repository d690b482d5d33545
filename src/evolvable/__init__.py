"""Evolvable: deployed LLM agents that learn from their own work, safely."""

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    """`evolvable.trajectory` without importing the store on `import evolvable` (keeps the CLI fast)."""
    if name == "trajectory":
        from evolvable.sdk import trajectory

        return trajectory
    raise AttributeError(f"module 'evolvable' has no attribute {name!r}")
