"""CLI command groups; see main.py for how they are discovered."""
