"""KServe v2 / Triton HTTP frontend (FastAPI)."""

from workbench.frontends.http.app import create_app

__all__ = ["create_app"]
