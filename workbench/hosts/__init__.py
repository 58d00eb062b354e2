"""Hosts: programs that run the engine (the CLI; the Jupyter extension later)."""
