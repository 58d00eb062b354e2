"""``pb_utils.load_model`` / ``unload_model`` / ``is_model_ready``: model control from a model.

python_backend's model loading API (Triton 23.07+), with its signatures and texts: each call
is a ``control`` message to the server (:mod:`.control` runs it there) and blocks until the
answer comes. Allowed wherever the model runs (``initialize``, ``execute``, ``finalize``,
model threads), as in Triton; the server must run with ``--model-control-mode=explicit``
for loads and unloads (else the error carries Triton's "explicit model load / unload is not
allowed if polling is enabled"). Errors raise ``TritonModelException`` with Triton's text:
"Failed to load model: <server text>", "Failed to unload model: ...", "Failed to check
model readiness: ...". Arguments are checked as the pybind11 bindings do (``TypeError``
for a ``None`` or non-``str`` name).

Runs inside the stub process: the standard library only.
"""

from __future__ import annotations

import itertools
import threading
from typing import Any

from workbench.backends.python import pb_runtime
from workbench.backends.python.pb_args import check_str, incompatible
from workbench.backends.python.pb_tensor import TritonModelException


def load_model(model_name: str, config: str = "", files: dict[str, bytes] | None = None) -> None:
    """Load (or reload) ``model_name``; returns when the load is done.

    Args:
        model_name: the model to load.
        config: a JSON model config overriding config.pbtxt ("" for none).
        files: ``{"file:<version>/<file name>": bytes}``, the files of the model folder to
            load from instead of the repository (``config`` is then required).

    Raises:
        TypeError: ``model_name`` or ``config`` is not a ``str``.
        TritonModelException: ``files`` is not a dict (Triton's text), or the server refused
            or failed the load ("Failed to load model: <reason>").
    """
    name = check_str("load_model", "model_name", model_name)
    config_text = check_str("load_model", "config", config)
    payload = None
    if files is not None:
        if not isinstance(files, dict):
            raise TritonModelException(
                f"failed to load model '{name}', files should be a dictionary of file paths and file contents"
            )
        payload = {}
        for key, value in files.items():
            if not isinstance(value, (bytes, bytearray, memoryview)):
                raise incompatible("load_model", "files", "a dict of str to bytes", value)
            payload[check_str("load_model", "files", key)] = bytes(value)
    _call("Failed to load model: ", {"kind": "load", "model": name, "config": config_text, "files": payload})


def unload_model(model_name: str, unload_dependents: bool = False) -> None:
    """Start unloading ``model_name`` (and, with ``unload_dependents``, the composing models
    of an ensemble); returns once the unload has started, as Triton's (it does not wait for
    the model to be unloaded).

    Raises:
        TypeError: ``model_name`` is not a ``str`` or ``unload_dependents`` not a ``bool``.
        TritonModelException: the server refused ("Failed to unload model: <reason>").
    """
    name = check_str("unload_model", "model_name", model_name)
    if not isinstance(unload_dependents, bool):
        raise incompatible("unload_model", "unload_dependents", "bool", unload_dependents)
    _call("Failed to unload model: ", {"kind": "unload", "model": name, "unload_dependents": unload_dependents})


def is_model_ready(model_name: str, model_version: str = "") -> bool:
    """Whether ``model_name`` (version ``model_version``; "": the server's choice) is ready.
    An unknown model or version is not ready (False).

    Raises:
        TypeError: ``model_name`` or ``model_version`` is not a ``str``.
        TritonModelException: the version is not an integer >= 0 ("Failed to check model
            readiness: failed to get model version from specified version string ...").
    """
    name = check_str("is_model_ready", "model_name", model_name)
    version = check_str("is_model_ready", "model_version", model_version)
    return bool(_call("Failed to check model readiness: ", {"kind": "ready", "model": name, "version": version}))


def _call(prefix: str, request: dict) -> Any:
    answer = pb_runtime.require().model_control(request)
    if answer["error"] is not None:
        raise TritonModelException(prefix + answer["error"])
    return answer["result"]


class ControlCalls:
    """The stub's model-control calls in flight, by call id (any thread may call).

    Args:
        send: sends one event message to the server.
    """

    def __init__(self, send: Any) -> None:
        self._send = send
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._waiting: dict[int, tuple[threading.Event, list[dict]]] = {}

    def call(self, request: dict) -> dict:
        """Send ``request`` and wait for its ``control_response``."""
        call_id = next(self._ids)
        done, answer = threading.Event(), list[dict]()
        with self._lock:
            self._waiting[call_id] = (done, answer)
        try:
            self._send({"op": "control", "call": call_id, **request})
            done.wait()
        finally:
            with self._lock:
                self._waiting.pop(call_id, None)
        return answer[0]

    def deliver(self, message: dict) -> None:
        """Reader thread: a ``control_response`` arrived."""
        with self._lock:
            waiting = self._waiting.get(message["call"])
        if waiting is not None:
            waiting[1].append(message)
            waiting[0].set()


__all__ = ["ControlCalls", "is_model_ready", "load_model", "unload_model"]
