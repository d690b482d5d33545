"""The one seam for talking to model servers: a pooled aiohttp client per proxy.

aiohttp, not httpx: on this machine an httpx client made a pass-through proxy about ten times slower
under concurrency (docs/proxy.md). Connections are kept alive and reused across requests.
"""

from __future__ import annotations

from dataclasses import dataclass

import aiohttp

from evolvable.errors import UpstreamError, map_exceptions
from evolvable.proxy.config import TokenCapture, UpstreamConfig


@dataclass
class UpstreamState:
    """What the proxy learned about an upstream at run time."""

    accepts_token_fields: bool = True
    """False after the upstream rejected `return_token_ids`/`logprobs` with a 400 (token_capture=auto)."""


class UpstreamClient:
    """Pooled HTTP client for all configured upstreams. Create inside a running event loop."""

    def __init__(self, upstreams: list[UpstreamConfig], *, pool_size: int = 512) -> None:
        self.upstreams = {u.name: u for u in upstreams}
        self.state = {u.name: UpstreamState() for u in upstreams}
        self._timeouts = {
            u.name: aiohttp.ClientTimeout(total=None, connect=u.connect_timeout_s, sock_read=u.timeout_s)
            for u in upstreams
        }
        self._headers: dict[tuple[str, str | None], dict[str, str]] = {}
        connector = aiohttp.TCPConnector(limit=pool_size, limit_per_host=0, keepalive_timeout=60, ttl_dns_cache=300)
        self.session = aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(total=None),
            auto_decompress=True,
            skip_auto_headers=("User-Agent",),
            cookie_jar=aiohttp.DummyCookieJar(),
        )

    async def close(self) -> None:
        await self.session.close()

    def wants_token_fields(self, upstream: UpstreamConfig) -> bool:
        if upstream.token_capture == TokenCapture.never:
            return False
        if upstream.token_capture == TokenCapture.always:
            return True
        return self.state[upstream.name].accepts_token_fields

    def headers(self, upstream: UpstreamConfig, client_bearer: str | None) -> dict[str, str]:
        key = upstream.api_key or client_bearer
        cached = self._headers.get((upstream.name, key))
        if cached is None:
            cached = {"Content-Type": "application/json"}
            if key:
                cached["Authorization"] = f"Bearer {key}"
            if len(self._headers) < 1024:  # bounded: client keys vary only when forwarded
                self._headers[(upstream.name, key)] = cached
        return cached

    async def post(
        self, upstream: UpstreamConfig, path: str, body: bytes, headers: dict[str, str]
    ) -> aiohttp.ClientResponse:
        """Send a request; the caller reads (or streams) and releases the response.

        Connection failures and timeouts become UpstreamError with the status the client should see.
        """
        timeout = self._timeouts.get(upstream.name) or aiohttp.ClientTimeout(
            total=None, connect=upstream.connect_timeout_s, sock_read=upstream.timeout_s
        )
        try:  # the hot path: no context manager, the translation only runs on a failure
            return await self.session.post(upstream.url(path), data=body, headers=headers, timeout=timeout)
        except (TimeoutError, aiohttp.ClientError) as err:
            raise _unreachable(upstream, err) from err

    async def get_json(self, upstream: UpstreamConfig, path: str) -> object:
        timeout = aiohttp.ClientTimeout(total=upstream.connect_timeout_s + 10)

        def failed(err: Exception) -> UpstreamError:
            return UpstreamError(f"upstream {upstream.name} failed on {path}: {err}", status_code=502)

        with map_exceptions({TimeoutError: failed, aiohttp.ClientError: failed, ValueError: failed}):
            async with self.session.get(upstream.url(path), headers=self.headers(upstream, None), timeout=timeout) as r:
                if r.status != 200:
                    raise UpstreamError(f"upstream {upstream.name} answered {r.status} on {path}", status_code=502)
                return await r.json(content_type=None)


def _unreachable(upstream: UpstreamConfig, err: Exception) -> UpstreamError:
    """aiohttp's failure to reach or hear from `upstream`, as the status its client should see."""
    if isinstance(err, TimeoutError):  # before ClientError: aiohttp's timeouts are both
        return UpstreamError(
            f"upstream {upstream.name} timed out: {err}", status_code=504, error_type="upstream_timeout"
        )
    return UpstreamError(
        f"upstream {upstream.name} unreachable: {err}", status_code=502, error_type="upstream_unreachable"
    )
