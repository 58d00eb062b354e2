"""The one error ``workbench perf`` raises for anything that stops a measurement."""

from __future__ import annotations


class PerfError(Exception):
    """A measurement could not run or could not finish: the model is unknown or unsupported,
    the input data does not fit the model, a request failed (perf_analyzer aborts on the first
    failed request; :attr:`PerfOptions.continue_on_error` counts failures instead), or a
    measurement window recorded no successful request.

    The message is one line meant for the user; the CLI prints it and exits with status 1.
    """


def error_text(exc: BaseException) -> str:
    """One line from a target's error: tritonclient's exceptions keep the server's text in
    ``message()`` (gRPC's ``str()`` adds the status code), others in ``str()``."""
    message = getattr(exc, "message", None)
    text = message() if callable(message) else str(exc)
    return " ".join((text or type(exc).__name__).split())
