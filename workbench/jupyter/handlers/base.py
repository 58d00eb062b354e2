"""The base of every workbench REST handler: Jupyter's ``APIHandler`` (its authentication,
XSRF and CORS rules, JSON errors) plus the engine error translation.

An engine error (:class:`~workbench.WorkbenchError`) raised by a handler is answered with
the HTTP status of its Triton status code by the error boundary every edge uses
(:func:`workbench.frontends.error_boundary.failure`: NOT_FOUND 404, UNAVAILABLE 503,
INVALID_ARG 400, ...), and Jupyter's JSON error body: ``{"message": "<engine message>",
"reason": "<code>"}``. A request body is held to ``--http-max-input-size`` by the one body
reader (:func:`workbench.frontends.http.body_limits.received_body`): over it, 400 with Triton's
"request JSON size of N bytes exceeds the maximum allowed input size of M bytes. Use
--http-max-input-size to increase the limit.", as the v2 load route answers.
"""

from __future__ import annotations

import json
from typing import Any

from jupyter_server.base.handlers import APIHandler

from workbench import InvalidArgument, Server, WorkbenchError
from workbench.common.switches import parse_switch
from workbench.frontends.error_boundary import failure
from workbench.frontends.http.body_limits import received_body
from workbench.jupyter.host import EngineHost

#: the authorization resource of every workbench route (for a custom jupyter_server Authorizer)
AUTH_RESOURCE = "workbench"


class WorkbenchHandler(APIHandler):
    """An API handler over the engine of this Jupyter server (``settings["workbench_host"]``).

    Subclasses decorate their methods with ``@tornado.web.authenticated`` and
    ``@jupyter_server.auth.decorator.authorized``: an unauthenticated request gets 403, as
    any Jupyter API does; the action checked is Jupyter's for the HTTP method (GET = read,
    POST / PUT = write) on the resource ``workbench``.
    """

    auth_resource = AUTH_RESOURCE

    @property
    def host(self) -> EngineHost:
        return self.settings["workbench_host"]

    def engine(self) -> Server:
        """The running engine.

        Raises:
            ServerNotReady: it is not running (503, with the host's state and reason).
        """
        return self.host.engine()

    def json_body(self) -> dict[str, Any]:
        """The request body as a JSON object ({} when empty), at most ``--http-max-input-size``
        bytes (tornado read it whole before the handler ran, up to Jupyter's
        ``max_body_size``).

        Raises:
            InvalidArgument: the body is over the limit, or not a JSON object (400).
        """
        raw = received_body(self.request, self.engine().options.http_max_input_size)
        if not raw:
            return {}
        try:
            body = json.loads(raw)
        except (UnicodeDecodeError, ValueError) as exc:
            raise InvalidArgument(f"request body is not valid JSON: {exc}") from None
        if not isinstance(body, dict):
            raise InvalidArgument("request body must be a JSON object")
        return body

    def bool_argument(self, name: str) -> bool:
        """A query flag: an on/off word (:func:`workbench.common.switches.parse_switch`: ``true``,
        ``1``, ``yes``, ``on`` or ``false``, ``0``, ``no``, ``off``; absent = False).

        Raises:
            InvalidArgument: any other value (400).
        """
        value = self.get_query_argument(name, "") or "false"
        switch = parse_switch(value)
        if switch is None:
            raise InvalidArgument(f"query parameter '{name}' must be true or false, got '{value.lower()}'")
        return switch

    def reply(self, payload: object, status: int = 200) -> None:
        """Finish with ``payload`` as JSON."""
        self.set_status(status)
        self.finish(json.dumps(payload))

    def reply_error(self, error: WorkbenchError, status: int | None = None, **extra: object) -> None:
        """Finish with the engine error's status (or ``status``) and Jupyter's error body
        (plus ``extra``)."""
        self.reply({"message": error.message, "reason": error.code.value, **extra},
                   status or failure(error).http_status)

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        exc_info = kwargs.get("exc_info")
        error = exc_info[1] if exc_info else None
        if isinstance(error, WorkbenchError):
            self.reply_error(error)
            return
        super().write_error(status_code, **kwargs)

    def log_exception(self, typ: Any, value: Any, tb: Any) -> None:
        if isinstance(value, WorkbenchError):  # an answer, not a server fault: no traceback
            self.log.warning("%s %s: %s", self.request.method, self.request.path, value.message)
            return
        super().log_exception(typ, value, tb)


__all__ = ["AUTH_RESOURCE", "WorkbenchHandler"]
