"""The stub's bridge to the server, for the ``pb_utils`` calls that leave the stub.

BLS ``exec`` / ``async_exec``, ``InferenceResponseSender.send`` and ``Logger`` lines go
through :data:`runtime`, which the stub sets (:class:`~.stub.Stub`) before it imports the
model; outside a stub it is None (BLS and senders then raise ``TritonModelException``, log
lines go to stderr).

Runs inside the stub process: the standard library only.
"""

from __future__ import annotations

from typing import Any

from workbench.backends.python.pb_tensor import TritonModelException

#: the running :class:`~.stub.Stub`; None outside a stub process
runtime: Any = None
#: the model's version folder (``pb_utils.get_model_dir()``), set by the stub before it
#: imports the model; "" outside a stub process
model_dir = ""


def require() -> Any:
    """The stub.

    Raises:
        TritonModelException: called outside a model's stub process.
    """
    if runtime is None:
        raise TritonModelException("this call is only available inside a model's stub process")
    return runtime


__all__ = ["model_dir", "require", "runtime"]
