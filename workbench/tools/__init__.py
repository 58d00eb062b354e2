"""Offline tools that operators run beside the server (``workbench build-plan``).

They use the config layer's model knowledge but never the engine; the CLI (``workbench.hosts``)
calls them directly.
"""
