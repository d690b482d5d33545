"""Governance: redaction, tenants, consent, retention, audit and curation between the spool and the store.

    gov = Governance.for_store(store)        # Governor, Authenticator (TenantDirectory), routers
    app = create_app(config, store, governor=gov.governor, authenticator=gov.authenticator, routers=gov.routers)
    gov.install(app)                         # audited trajectory reads; retention loop in the lifespan

Names are imported lazily, so `import evolvable.governance.redaction` stays light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the real types, for the type checker; at run time each name loads on first use
    from evolvable.governance.api import AuditReadsMiddleware, governance_routers
    from evolvable.governance.audit import AuditAction, AuditEntry, AuditLog
    from evolvable.governance.curation import Deduplicator, QualityConfig
    from evolvable.governance.datasets import DatasetCatalog, DatasetInfo
    from evolvable.governance.pipeline import Governor
    from evolvable.governance.purge import Purger, PurgeReport, PurgeRequest
    from evolvable.governance.redaction.tokenizer_registry import TokenizerRegistry
    from evolvable.governance.retention import RetentionJob, retention_loop
    from evolvable.governance.tenants import IssuedKey, Tenant, TenantDirectory
    from evolvable.governance.wiring import Governance

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

__all__ = [  # (spelled out, not sorted(_EXPORTS), so the type checker sees what is exported)
    "AuditAction",
    "AuditEntry",
    "AuditLog",
    "AuditReadsMiddleware",
    "DatasetCatalog",
    "DatasetInfo",
    "Deduplicator",
    "Governance",
    "Governor",
    "IssuedKey",
    "PurgeReport",
    "PurgeRequest",
    "Purger",
    "QualityConfig",
    "RetentionJob",
    "Tenant",
    "TenantDirectory",
    "TokenizerRegistry",
    "governance_routers",
    "retention_loop",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'evolvable.governance' has no attribute {name!r}")
    return getattr(importlib.import_module(f"evolvable.governance.{module}"), name)
