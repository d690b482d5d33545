"""Builders of realistic trajectories for governance tests (the product's example, shared with benchmarks)."""

from evolvable.protocol.examples import make_trajectory

__all__ = ["make_trajectory"]
