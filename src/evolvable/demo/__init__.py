"""`evolvable demo`: the whole loop on the embedded defaults (see run.py)."""

from evolvable.demo.run import DemoConfig, run_demo

__all__ = ["DemoConfig", "run_demo"]
