"""Server side of model control from a model: ``pb_utils.load_model`` / ``unload_model`` /
``is_model_ready`` (python_backend's model loading API, Triton 23.07+).

Each ``control`` message from a stub runs the server's own explicit-mode API on the engine's
loop (:class:`~workbench.backends.base.BackendContext`), on a thread of its own so the
stub's reader thread never waits; the answer goes back as a ``control_response`` message
with the same call id: ``{"result": ..., "error": None}`` or ``{"error": "<engine text>"}``
(the stub prefixes Triton's "Failed to load model: " & co. and raises
``TritonModelException``). As Triton's python_backend:

* ``load`` waits until the load is done (``TRITONSERVER_ServerLoadModelWithParameters``);
  ``config`` is a JSON model config, ``files`` maps ``"file:<version>/<name>"`` to bytes (the
  repository load API's parameters; another key is refused with the core's text
  "Unrecognized load parameter '<k>' with type 'BYTES'"). Outside ``--model-control-mode=
  explicit`` the engine answers Triton's "explicit model load / unload is not allowed if
  polling is enabled".
* ``unload`` returns once the unload has started (Triton's ``TRITONSERVER_ServerUnloadModel``
  does not wait for the model to be unloaded): the model's versions have left service when
  nothing else held the model, and a model may unload itself from its ``execute``.
* ``ready``: the version string is parsed as python_backend does (``""``: any version; not
  an integer or negative: "failed to get model version from specified version string ...");
  an unknown model is not ready (False), not an error, as Triton's ``ModelIsReady``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import re
import threading
from typing import Any

from workbench.backends.base import BackendContext
from workbench.backends.python.process import StubDied, StubProcess
from workbench.common.errors import InternalError, InvalidArgument, WorkbenchError

log = logging.getLogger(__name__)

#: the file parameters' prefix (Triton's ``file:<version>/<name>`` load parameters)
FILE_PREFIX = "file:"
_INTEGER = re.compile(r"\s*[+-]?\d+")  # what std::stol reads from the start of a string


class ModelControlForwarder:
    """Runs the model-control calls of one model instance's stubs.

    Args:
        context: the engine's loop and model control; None outside a server (every call
            then fails).
        instance_name: for log lines.
    """

    def __init__(self, context: BackendContext | None, instance_name: str) -> None:
        self._context = context
        self._instance_name = instance_name
        self._unloads: set[asyncio.Future] = set()  # unloads started and not finished

    def submit(self, message: dict, stub: StubProcess) -> None:
        """Start one call (called on the stub's reader thread; never blocks)."""
        threading.Thread(target=self._serve, args=(message, stub), daemon=True,
                         name=f"{self._instance_name}-control").start()

    def _serve(self, message: dict, stub: StubProcess) -> None:
        reply: dict[str, Any] = {"op": "control_response", "call": message["call"], "result": None, "error": None}
        try:
            reply["result"] = self._run(message)
        except WorkbenchError as exc:
            reply["error"] = exc.message
        except Exception as exc:  # noqa: BLE001 - reported to the model, never fatal to the server
            reply["error"] = f"{type(exc).__name__}: {exc}"
        with contextlib.suppress(StubDied, OSError):  # the model is gone: nobody waits
            stub.send(reply)

    def _run(self, message: dict) -> Any:
        context = self._context
        if context is None or context.load_model is None or context.unload_model is None \
                or context.model_ready is None:
            raise InternalError("model control is only available inside a running server")
        name, kind = message["model"], message["kind"]
        if kind == "load":
            work: Any = context.load_model(name, message["config"] or None, _files(message["files"]))
        elif kind == "unload":
            work = self._start_unload(name, bool(message["unload_dependents"]))
        elif kind == "ready":
            work = context.model_ready(name, model_version(message["version"]))
        else:
            raise InvalidArgument(f"unknown model control request '{kind}'")
        future: concurrent.futures.Future = asyncio.run_coroutine_threadsafe(work, context.loop)
        return future.result()

    async def _start_unload(self, name: str, unload_dependents: bool) -> None:
        """Start the unload and return once it has begun (its first step ran: the explicit
        mode check, and, when no load or unload of ``name`` holds it, the versions' move
        out of service); its later failure is logged."""
        assert self._context is not None and self._context.unload_model is not None
        task = asyncio.ensure_future(self._context.unload_model(name, unload_dependents))
        await asyncio.sleep(0)  # one loop turn: the task's first step runs before this resumes
        if task.done():
            task.result()  # raises the refusal (not explicit mode)
            return
        self._unloads.add(task)
        task.add_done_callback(self._unload_done)

    def _unload_done(self, task: asyncio.Future) -> None:
        self._unloads.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("model instance '%s': unload_model failed: %s", self._instance_name, task.exception())


def model_version(text: str) -> str:
    """python_backend's version string -> the engine's (``""``: any version).

    Raises:
        InvalidArgument: not an integer or negative (python_backend's texts).
    """
    if not text:
        return ""
    match = _INTEGER.match(text)
    if match is None:
        raise InvalidArgument(f"failed to get model version from specified version string '{text}' "
                              "(details: stol), version should be an integral value > 0")
    version = int(match.group())
    if version < 0:
        raise InvalidArgument(f"failed to get model version from specified version string '{text}', "
                              "version should be an integral value > 0")
    return str(version)


def _files(files: dict[str, bytes] | None) -> dict[str, bytes] | None:
    """``{"file:<path>": bytes}`` -> the engine's ``{"<path>": bytes}`` (None when empty).

    Raises:
        InvalidArgument: a key without the ``file:`` prefix (the core's text).
    """
    if not files:
        return None
    for key in files:
        if not key.startswith(FILE_PREFIX):
            raise InvalidArgument(f"Unrecognized load parameter '{key}' with type 'BYTES'")
    return {key[len(FILE_PREFIX):]: value for key, value in files.items()}
