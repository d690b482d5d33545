"""Repositories: the SQL of each component's tables, one small module per component.

Components depend on the `Protocol` of the repository they use (so tests can hand them a fake) and
never on SQLAlchemy; the `Sql...` classes here are the one implementation, built on the store's engine.
A change that must be atomic with its audit entry takes the entry (`AuditRecord`) and writes both in
one transaction: the repository, not the caller, owns transactions.
"""
