"""The adapters loaded on the policy servers follow the registry.

Publishing a policy version hot-loads its adapter into every configured policy server
(`trainer.publish`). When the version stops serving (rolled back, superseded by a promotion, rejected
by a gate, retired by erasure) nothing else frees the servers of it, and vLLM holds only `--max-loras`
adapters at a time; when an earlier adapter version serves again (a rollback restores it, or a policy
server restarted empty) it must be loaded again before traffic reaches it. `AdapterSync.sync` reconciles
each server with the registry after every change: adapters of versions that no longer serve are
unloaded, adapters of active and canary versions are loaded. Adapters the registry does not know (a
snapshot under validation, one loaded by hand) are left alone.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import httpx

from evolvable.control.models import VersionKind, VersionRecord, VersionState
from evolvable.control.registry import Registry
from evolvable.errors import UpstreamError
from evolvable.trainer.publish import load_lora, unload_lora

log = logging.getLogger(__name__)
SERVED = (VersionState.active, VersionState.canary)
KEPT = (*SERVED, VersionState.candidate)
"""A candidate's adapter stays loaded: the gates replay it."""


def loaded_adapters(server: str, *, timeout_s: float = 30.0) -> set[str]:
    """Names of the adapters a vLLM-compatible server has loaded (`GET /v1/models`, entries with a parent)."""
    url = server.rstrip("/")
    url = url if url.endswith("/v1") else url + "/v1"
    try:
        reply = httpx.get(f"{url}/models", timeout=timeout_s)
        reply.raise_for_status()
        models = reply.json()["data"]
    except (httpx.HTTPError, ValueError, KeyError, TypeError) as err:
        raise UpstreamError(f"cannot list the adapters of policy server {server}: {err}") from None
    return {str(m["id"]) for m in models if isinstance(m, dict) and m.get("parent")}


@dataclass
class AdapterSync:
    servers: tuple[str, ...]
    """Base URLs of the policy servers adapters are hot-loaded into (the weights lever's servers)."""

    def sync(self, registry: Registry) -> list[str]:
        """Unload retired adapters from, and load serving ones into, every server; returns what it did.
        A server that cannot be reached or refuses is reported and retried at the next change."""
        versions = [v for v in registry.versions(kind=VersionKind.policy) if v.policy().lora_name]
        kept = {str(v.policy().lora_name) for v in versions if v.state in KEPT}
        known = {str(v.policy().lora_name) for v in versions}
        served: dict[str, VersionRecord] = {str(v.policy().lora_name): v for v in versions if v.state in SERVED}
        actions: list[str] = []
        for server in self.servers:
            try:
                loaded = loaded_adapters(server)
            except UpstreamError as err:
                actions.append(f"adapters not synchronised: {err}")
                continue
            for name in sorted((loaded & known) - kept):
                try:
                    unload_lora(server, name)
                    actions.append(f"unloaded retired adapter {name} from {server}")
                except UpstreamError as err:
                    actions.append(f"could not unload retired adapter {name}: {err}")
            for name, version in sorted(served.items()):
                path = version.policy().adapter_path
                if name in loaded or not path:
                    continue
                try:
                    load_lora(server, name, path)
                    actions.append(f"loaded adapter {name} of serving version {version.id} into {server}")
                except UpstreamError as err:
                    actions.append(f"could not load adapter {name} of serving version {version.id}: {err}")
        for action in actions:
            log.info("policy servers: %s", action)
        return actions
