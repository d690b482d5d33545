"""Alembic migrations of the store (one chain for every component's tables)."""
