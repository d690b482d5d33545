"""One call to put governance on a proxy app: Governor, Authenticator, routers, read audit, retention loop.

    gov = Governance.for_store(store)
    app = create_app(config, store, governor=gov.governor, authenticator=gov.authenticator, routers=gov.routers)
    gov.install(app)      # audits trajectory reads; runs retention in the app's lifespan

Keys are required when any API key exists or EVOLVABLE_ADMIN_KEY is set, decided per request (a proxy
started before the first key requires keys once one exists); until then (a fresh, local, single-tenant
proxy) calls without a known key belong to the tenant `default`, as without governance, while admin
routes still need an admin key.

`tokenizers` (model -> local tokenizer; default: the EVOLVABLE_TOKENIZERS setting) lets redacted calls keep
their token ids, redacted too, for RL; whoever starts the model passes its tokenizer here.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, FastAPI

from evolvable.governance.api import AuditReadsMiddleware, governance_routers
from evolvable.governance.audit import AuditAction
from evolvable.governance.pipeline import Governor
from evolvable.governance.purge import DerivedEraser, Purger
from evolvable.governance.retention import RetentionJob, retention_loop
from evolvable.governance.tenants import DEFAULT_TENANT, TenantDirectory
from evolvable.proxy.hooks import Authenticator, Principal
from evolvable.settings import get_settings
from evolvable.store import Store

if TYPE_CHECKING:
    from evolvable.governance.redaction.tokenizer_registry import TokenizerRegistry


def _configured_tokenizers() -> TokenizerRegistry:
    from evolvable.governance.redaction.tokenizer_registry import TokenizerRegistry

    return TokenizerRegistry.from_spec(get_settings().tokenizers)


class KeysOrDefaultTenant:
    """A known key maps to its tenant; anything else is the `default` tenant (never admin)."""

    def __init__(self, directory: TenantDirectory) -> None:
        self.directory = directory
        self._default = Principal(tenant_id=DEFAULT_TENANT)

    def authenticate(self, bearer: str | None) -> Principal | None:
        return self.directory.authenticate(bearer) or self._default

    def key_active(self, key_id: str) -> bool:
        return self.directory.key_active(key_id)

    def key_active_cached(self, key_id: str) -> bool | None:
        return self.directory.key_active_cached(key_id)


class KeysOnceAnyExist(KeysOrDefaultTenant):
    """Open (the `default` tenant) only while no key exists; decided per request, so a proxy started
    before the first key requires keys as soon as one is issued (by any process)."""

    def authenticate(self, bearer: str | None) -> Principal | None:
        if self.directory.keys_exist():
            return self.directory.authenticate(bearer)
        return super().authenticate(bearer)


@dataclass
class Governance:
    store: Store
    directory: TenantDirectory
    governor: Governor
    authenticator: Authenticator
    routers: list[APIRouter]
    retention_interval_s: float = 3600.0
    erasers: tuple[DerivedEraser, ...] = ()
    """Erase what other components copied from purged runs (the control plane's exemplars); see purge.py."""

    @classmethod
    def for_store(
        cls,
        store: Store,
        *,
        require_keys: bool | None = None,
        person_names: bool = False,
        retention_interval_s: float = 3600.0,
        admin_key: str | None = None,
        tokenizers: TokenizerRegistry | None = None,
        erasers: Sequence[DerivedEraser] = (),
    ) -> Governance:
        directory = (
            TenantDirectory(store.engine, admin_key=admin_key)
            if admin_key is not None
            else TenantDirectory.from_store(store)
        )
        authenticator: Authenticator = (
            KeysOnceAnyExist(directory)
            if require_keys is None
            else directory
            if require_keys
            else KeysOrDefaultTenant(directory)
        )
        return cls(
            store=store,
            directory=directory,
            governor=Governor(
                store,
                directory=directory,
                audit=directory.audit,
                person_names=person_names,
                tokenizers=tokenizers if tokenizers is not None else _configured_tokenizers(),
            ),
            authenticator=authenticator,
            routers=governance_routers(store, directory, erasers=erasers),
            retention_interval_s=retention_interval_s,
            erasers=tuple(erasers),
        )

    def audit_control_action(self, actor: str, action: str, target: str) -> None:
        """The control API's `on_action` hook: an approve, promote or rollback by hand, on the audit log."""
        self.directory.audit.record(
            AuditAction.control_action, actor=actor, target=f"{action}:{target}", details={"action": action}
        )

    def install(self, app: FastAPI) -> None:
        """Add the read-audit middleware, build the redaction engine at startup and run the retention loop inside
        the app's lifespan."""
        app.add_middleware(AuditReadsMiddleware, directory=self.directory)
        inner = app.router.lifespan_context
        store, interval = self.store, self.retention_interval_s
        job = RetentionJob(store, directory=self.directory, purger=Purger(store, erasers=self.erasers))

        governor = self.governor

        @contextlib.asynccontextmanager
        async def lifespan(a: Any) -> AsyncIterator[Any]:  # (the app's own lifespan decides the state's type)
            # before the proxy's own startup, which may fork the writer: the fork inherits the built engine
            await asyncio.to_thread(governor.warm_up)
            async with inner(a) as state:
                task = asyncio.create_task(retention_loop(store, interval, job=job))
                try:
                    yield state
                finally:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task

        app.router.lifespan_context = lifespan
