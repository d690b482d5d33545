"""The processes the demo runs: the embedded policy server (a subprocess, see
`evolvable.policy_server.launcher`) and the proxy (in-process). The proxy
runs in this process on a uvicorn thread so the control plane the demo drives and the harness
router the proxy consults are the same objects.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import httpx

from evolvable.app.local import ServerThread
from evolvable.model_loading import cached_model_dir
from evolvable.policy_server.launcher import policy_server

if TYPE_CHECKING:
    from evolvable.governance.redaction.tokenizer_registry import TokenizerRegistry

__all__ = ["ProxyServer", "embedded_tokenizers", "policy_server"]


def embedded_tokenizers(model: str) -> TokenizerRegistry:
    """The embedded model's tokenizer (cached next to its weights by the policy server's first load) for
    governance, so calls it redacts keep redacted token ids. It serves the model's LoRA adapters too (the
    fallback): every name the embedded policy server answers to shares the base model's tokenizer."""
    from evolvable.governance.redaction.tokenizer_registry import TokenizerRegistry

    return TokenizerRegistry({model: cached_model_dir(model)}, fallback=model)


class ProxyServer(ServerThread):
    """The proxy app on a uvicorn thread, as a context manager; `v1` is its OpenAI base URL."""

    @property
    def v1(self) -> str:
        return self.url + "/v1"

    def __enter__(self) -> ProxyServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def flush(self) -> None:
        """Wait until everything the proxy captured so far is in the store (listing reads its own writes)."""
        httpx.get(f"{self.v1}/trajectories", params={"limit": 1}, timeout=60.0).raise_for_status()
