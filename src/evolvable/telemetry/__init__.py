"""Prometheus metrics of every component, defined in one place (depends only on prometheus_client)."""
