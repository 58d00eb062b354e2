"""OpenAI-compatible routes (``/v1/...``) over the engine: models, embeddings, completions.

Mounted by :func:`workbench.frontends.http.create_app` beside the v2 routes, so every host
that serves the v2 HTTP app (``workbench serve``, the Jupyter host's ports) serves them too,
with the same request guard (restricted API keys), body limits, engine, batching and
statistics. Documented in ``docs/openai.md``.
"""

from workbench.frontends.openai.routes import openai_routes

__all__ = ["openai_routes"]
