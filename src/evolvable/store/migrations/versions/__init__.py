"""Revisions of the store schema, oldest first (0001, 0002, ...)."""
