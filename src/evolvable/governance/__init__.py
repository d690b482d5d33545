"""Governance: redaction, tenants, consent, retention, audit and curation between the spool and the store.

    gov = Governance.for_store(store)        # Governor, Authenticator (TenantDirectory), routers
    app = create_app(config, store, governor=gov.governor, authenticator=gov.authenticator, routers=gov.routers)
    gov.install(app)                         # audited trajectory reads; retention loop in the lifespan

Names are imported lazily, so `import evolvable.governance.redaction` stays light.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "AuditAction": "audit",
    "AuditEntry": "audit",
    "AuditLog": "audit",
    "AuditReadsMiddleware": "api",
    "DatasetCatalog": "datasets",
    "DatasetInfo": "datasets",
    "Deduplicator": "curation",
    "Governance": "wiring",
    "Governor": "pipeline",
    "IssuedKey": "tenants",
    "PurgeReport": "purge",
    "PurgeRequest": "purge",
    "Purger": "purge",
    "QualityConfig": "curation",
    "RetentionJob": "retention",
    "Tenant": "tenants",
    "TenantDirectory": "tenants",
    "TokenizerRegistry": "redaction.tokenizer_registry",
    "governance_routers": "api",
    "retention_loop": "retention",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'evolvable.governance' has no attribute {name!r}")
    return getattr(importlib.import_module(f"evolvable.governance.{module}"), name)
