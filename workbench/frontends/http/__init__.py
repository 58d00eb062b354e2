"""KServe v2 / Triton HTTP frontend (FastAPI on uvicorn)."""

from workbench.frontends.http.app import create_app
from workbench.frontends.http.protocol import CoalescingHttpToolsProtocol

__all__ = ["CoalescingHttpToolsProtocol", "create_app"]
