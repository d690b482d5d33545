"""`evolvable demo`: the whole loop on the embedded defaults (see run.py)."""

from evolvable.demo.config import DemoConfig
from evolvable.demo.run import run_demo

__all__ = ["DemoConfig", "run_demo"]
