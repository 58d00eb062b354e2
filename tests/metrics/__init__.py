"""Prometheus metrics and tracing."""
