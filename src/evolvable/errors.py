"""The one exception tree of Evolvable. Third-party errors are translated at the boundary.

EvolvableError
├── ProtocolError          invalid ATDP data (carries readable, located reasons)
├── ConversionError        an input cannot be converted to or from ATDP
├── StoreError             the store cannot be opened, migrated or written
│   └── NotFound           a record does not exist (or belongs to another tenant)
├── GovernanceError        redaction, consent, retention or purge failed
│   └── RedactionFailed    a redaction stage raised; content is stored as a marker
├── UpstreamError          the model server failed, timed out or answered nonsense
├── ControlError           the control plane refused or failed an action
└── TrainingError          a training job cannot run or failed
"""

from __future__ import annotations


class EvolvableError(Exception):
    """Base of every error Evolvable raises on purpose."""


class ProtocolError(EvolvableError):
    def __init__(self, message: str, reasons: list[str] | None = None) -> None:
        self.reasons = reasons or []
        detail = "".join(f"\n  - {r}" for r in self.reasons)
        super().__init__(message + detail)


class ConversionError(EvolvableError):
    pass


class StoreError(EvolvableError):
    pass


class NotFound(StoreError):
    pass


class GovernanceError(EvolvableError):
    pass


class RedactionFailed(GovernanceError):
    pass


class UpstreamError(EvolvableError):
    def __init__(self, message: str, status_code: int = 502, error_type: str = "upstream_error") -> None:
        self.status_code = status_code
        self.error_type = error_type
        super().__init__(message)


class ControlError(EvolvableError):
    pass


class TrainingError(EvolvableError):
    pass
