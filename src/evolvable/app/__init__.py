"""The one composition root: builds a whole Evolvable stack (store, governance, proxy, control planes,
policy servers) from one configuration (`evolvable.yaml`). `evolvable serve`, `evolvable demo`,
`evolvable control tick` and the benchmarks all build through here, so what the demo measures is what
`serve` runs.

    config = load_config(Path("evolvable.yaml"))
    with build_stack(config) as stack:       # stack.app is the ASGI app; stack.planes ticks the control loop
        ...
"""

from evolvable.app.config import ConfigError, EvolvableConfig, load_config, parse_config
from evolvable.app.stack import Stack, build_stack

__all__ = ["ConfigError", "EvolvableConfig", "Stack", "build_stack", "load_config", "parse_config"]
