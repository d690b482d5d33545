"""Governance: redaction, tenants, consent, retention, audit and curation between the spool and the store."""
