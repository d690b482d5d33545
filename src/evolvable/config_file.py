"""Reading a configuration file: YAML (.yaml/.yml) or TOML (.toml), one way for every component."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import yaml

from evolvable.errors import EvolvableError


def read_config_file(path: Path, error: type[EvolvableError], what: str = "config") -> Any:
    """The parsed document (None for an empty YAML file). A file that cannot be read or parsed raises
    `error` (the caller's own kind, so its CLI reports it) naming `what` and the reason."""
    try:
        text = path.read_text()
    except OSError as err:
        raise error(f"cannot read {what} {path}: {err.strerror or err}") from None
    try:
        return tomllib.loads(text) if path.suffix == ".toml" else yaml.safe_load(text)
    except (tomllib.TOMLDecodeError, yaml.YAMLError) as err:
        raise error(f"cannot parse {what} {path} as {'TOML' if path.suffix == '.toml' else 'YAML'}: {err}") from None
