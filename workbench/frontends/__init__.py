"""Frontends: thin adapters from wire protocols to the engine's public API."""
