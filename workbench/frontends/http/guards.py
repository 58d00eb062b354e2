"""The HTTP port's first gate: browsers of other sites, and the restricted API groups.

:class:`RequestGuard` is the outermost ASGI layer of the v2 app, so a request it refuses
reaches no route, reads no body and changes nothing. It answers 403 with Triton's error
shape ``{"error": "..."}`` when:

1. a browser page of another site sent it (beyond Triton): an ``Origin`` other than this
   server's own (host[:port] against ``Host``; ``Origin: null`` too), ``Sec-Fetch-Site:
   cross-site|same-site``, or a browser request whose ``Host`` is a name other than
   ``localhost`` (DNS rebinding; names under ``.localhost`` too);
2. a POST body is typed ``text/plain`` or ``multipart/form-data`` (any client), or
   ``application/x-www-form-urlencoded`` from a browser (accepted from others: ``curl -d``'s
   and libcurl's default, which perf_analyzer sends);
3. the API group is restricted (``--http-restricted-api``, :mod:`workbench.startup.restrictions`)
   and the key is missing: Triton's "This API is restricted, expecting header '<key>'".

On ``/v1/...`` (OpenAI-compatible) the answer is in OpenAI's error shape, and a missing key
is 401 ``authentication_error`` / ``invalid_auth`` as Triton's OpenAI frontend answers it.
Why, for users: docs/security.md ("Web pages of other sites", the restricted API groups)."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import urlsplit

import orjson

from workbench.startup.restrictions import Restriction

Scope = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Any, Any], Awaitable[None]]

#: v2 paths -> Triton's API group (``http_server.cc``'s RETURN_AND_RESPOND_IF_RESTRICTED
#: per handler); the first match wins
_MODEL = r"/v2/models/[^/]+(?:/versions/[^/]+)?"
API_GROUPS: list[tuple[re.Pattern, str]] = [
    (re.compile(r"^/v2/health/"), "health"),
    (re.compile(r"^/v2/models/stats$"), "statistics"),
    (re.compile(rf"^{_MODEL}/ready$"), "health"),
    (re.compile(rf"^{_MODEL}/(?:infer|generate|generate_stream)$"), "inference"),
    (re.compile(rf"^{_MODEL}/config$"), "model-config"),
    (re.compile(rf"^{_MODEL}/stats$"), "statistics"),
    (re.compile(rf"^{_MODEL}/trace/setting$"), "trace"),
    (re.compile(rf"^(?:/v2|{_MODEL})$"), "metadata"),
    (re.compile(r"^/v2/repository(?:/|$)"), "model-repository"),
    # the rollout extension (workbench's own): promote / rollback rewrite and reload a model
    (re.compile(r"^/v2/models/[^/]+/rollout(?:/|$)"), "model-repository"),
    (re.compile(r"^/v2/(?:system|cuda)sharedmemory(?:/|$)"), "shared-memory"),
    (re.compile(r"^/v2/trace/setting$"), "trace"),
    (re.compile(r"^/v2/logging$"), "logging"),
    # the OpenAI-compatible routes, grouped as Triton's OpenAI frontend groups them
    # (its api_restriction.py: inference; GET /v1/models and POST /v1/models/... model-repository)
    (re.compile(r"^/v1/(?:embeddings|completions|chat/completions)$"), "inference"),
    (re.compile(r"^/v1/models(?:/|$)"), "model-repository"),
]
#: content types a browser page may POST cross-site without a CORS preflight
_NEVER_ACCEPTED = ("text/plain", "multipart/form-data")
_FORM = "application/x-www-form-urlencoded"
_CROSS_SITE = ("cross-site", "same-site")


def api_group(path: str) -> str | None:
    """The Triton API group of a v2 path (``/v2/repository/index`` -> ``model-repository``);
    None for a path of no group (the app answers it 404)."""
    for pattern, group in API_GROUPS:
        if pattern.match(path):
            return group
    return None


class RequestGuard:
    """ASGI middleware in front of the v2 app: refuses cross-site browser requests,
    non-JSON POST bodies and restricted API groups without their key (403, see the module
    docstring); passes everything else on untouched.

    Args:
        app: the v2 ASGI app.
        restrictions: ``{group: Restriction}`` from ``ServerOptions.http_restrictions()``.
    """

    def __init__(self, app: ASGIApp, restrictions: dict[str, Restriction]) -> None:
        self.app = app
        self.restrictions = restrictions
        self._wanted = {b"host", b"origin", b"sec-fetch-site", b"sec-fetch-mode", b"content-type"}
        self._wanted.update(r.header.encode("latin-1") for r in restrictions.values())

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            refusal = self.refusal(scope)
            if refusal is not None:
                status: int = 403
                error: str | dict[str, Any] = refusal
                if scope["path"].startswith("/v1/"):
                    status, error = _openai_refusal(refusal)
                payload = orjson.dumps({"error": error})
                await send({"type": "http.response.start", "status": status, "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(payload)).encode())]})
                await send({"type": "http.response.body", "body": payload})
                return
        await self.app(scope, receive, send)

    def refusal(self, scope: Scope) -> str | None:
        """Why the request is refused (the 403 text), or None when it may pass."""
        headers: dict[bytes, str] = {}
        for key, value in scope["headers"]:
            if key in self._wanted:
                headers[key] = value.decode("latin-1")
        browser = _browser_refusal(headers, scope["method"])
        if browser is not None:
            return browser
        if self.restrictions:
            restriction = self.restrictions.get(api_group(scope["path"]) or "")
            if restriction is not None and not restriction.allows(
                    headers.get(restriction.header.encode("latin-1"))):
                return f"This API is restricted, expecting header '{restriction.header}'"
        return None


def _openai_refusal(refusal: str) -> tuple[int, dict[str, Any]]:
    """A refusal of a ``/v1`` route: its status and OpenAI-shaped error (the module docstring)."""
    if refusal.startswith("This API is restricted"):
        return 401, {"message": refusal + " with valid value", "type": "authentication_error",
                     "param": None, "code": "invalid_auth"}
    return 403, {"message": refusal, "type": "permission_error", "param": None, "code": None}


def _browser_refusal(headers: dict[bytes, str], method: str) -> str | None:
    origin = headers.get(b"origin")
    if origin is None and b"sec-fetch-site" not in headers and b"sec-fetch-mode" not in headers:
        return _body_type_refusal(headers, method, False)  # no browser: only the body type counts
    host = headers.get(b"host", "").strip().lower()
    if origin is not None and (origin.strip().lower() == "null"
                               or urlsplit(origin.strip()).netloc.lower() != host):
        return (f"cross-origin request refused: Origin '{origin}' is not this server "
                f"('{host}'); the v2 API does not serve pages of other sites")
    fetch_site = headers.get(b"sec-fetch-site", "").strip().lower()
    from_browser = origin is not None or b"sec-fetch-mode" in headers or fetch_site != ""
    if from_browser and not _local_or_ip(host):
        # DNS rebinding: a page of evil.example whose name now resolves to this server sends
        # same-origin requests (Origin and Host both evil.example); browsers are served only
        # under an IP address or localhost, as Jupyter's local_hostnames check does
        return (f"request from a browser refused: Host '{host}' is a name, not this server's "
                "address (use its IP address or localhost)")
    if fetch_site in _CROSS_SITE:
        return f"cross-site request refused (Sec-Fetch-Site: {fetch_site})"
    return _body_type_refusal(headers, method, from_browser)


def _body_type_refusal(headers: dict[bytes, str], method: str, from_browser: bool) -> str | None:
    """Rule 2 of the module docstring: a POST body typed as a page may send it cross-site."""
    if method == "POST":
        media_type = headers.get(b"content-type", "").split(";", 1)[0].strip().lower()
        if media_type in _NEVER_ACCEPTED or (media_type == _FORM and from_browser):
            return (f"POST body of Content-Type '{media_type}' refused: send "
                    "application/json or application/octet-stream (a web page of any site "
                    "can send that type without the server's consent)")
    return None


def _local_or_ip(host: str) -> bool:
    """True for ``localhost`` itself and IP literals (with or without a port). A name under
    ``.localhost`` is not: browsers do resolve it to loopback, but a resolver or ``/etc/hosts``
    may map it anywhere, and a page served under one (``evil.localhost``) is another site."""
    name = urlsplit(f"//{host}").hostname or ""
    if name == "localhost":
        return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


__all__ = ["API_GROUPS", "RequestGuard", "api_group"]
