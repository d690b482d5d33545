"""The processes the demo runs: the embedded policy server (a subprocess, see
`evolvable.policy_server.launcher`) and the proxy (in-process). The proxy
runs in this process on a uvicorn thread so the control plane the demo drives and the harness
router the proxy consults are the same objects.
"""

from __future__ import annotations

import httpx

from evolvable.policy_server.launcher import policy_server
from evolvable.trainer.stack import ServerThread

__all__ = ["ProxyServer", "policy_server"]


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
