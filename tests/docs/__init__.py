"""Docs, examples, notebooks and sample models: what a user reads and runs."""
