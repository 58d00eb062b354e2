"""Triton's ``Model``: one model (and version) of a started :class:`Server`, to infer on and
to read metadata, config, readiness and statistics from."""

from __future__ import annotations

from typing import Any

from workbench import WorkbenchError, model_config_to_json
from workbench.tritonserver._enums import ModelBatchFlag, ModelTxnPropertyFlag
from workbench.tritonserver._refs import ServerRef
from workbench.tritonserver._request import InferenceRequest
from workbench.tritonserver._response import AsyncResponseIterator, ResponseIterator


class Model:
    """A model of a started server (from :meth:`Server.model`, :meth:`Server.models` or
    :meth:`Server.load`); ``version`` -1 is the version policy's latest READY one. Not
    checked until used, as Triton's.

    Raises:
        InvalidArgumentError: the server is not started ("Server not started").
    """

    def __init__(self, server: ServerRef, name: str, version: int = -1, state: str | None = None,
                 reason: str | None = None) -> None:
        server.check_started()
        self.server = server
        self.name = name
        self.version = version
        self.state = state
        self.reason = reason

    def at_version(self, name: str, version: int) -> Model:
        """The model ``name`` at ``version`` on the same server (a response's model)."""
        return Model(self.server, name, version)

    @property
    def _version(self) -> str:
        return "" if self.version < 0 else str(self.version)

    def create_request(self, **kwargs: Any) -> InferenceRequest:
        """An :class:`InferenceRequest` for this model (keyword arguments: its fields)."""
        kwargs.pop("model", None)
        return InferenceRequest(model=self, **kwargs)

    def infer(self, inference_request: InferenceRequest | None = None, raise_on_error: bool = True,
              **kwargs: Any) -> ResponseIterator:
        """Send a request; iterate the returned iterator for its responses (one, or a
        decoupled model's stream). Blocks until the first response is there.

        Raises:
            InvalidArgumentError: an unknown model (Triton's "Request for unknown model: ...
                is not found"), inputs that do not match the model, unconvertible inputs.
            UnavailableError: the model is not ready, the server is stopping.
            NotFoundError: the version is unknown.
            UnsupportedError: a GPU ``output_memory_type``.
        """
        if inference_request is None:
            inference_request = InferenceRequest(model=self, **kwargs)
        return ResponseIterator(self, inference_request, raise_on_error)

    def async_infer(self, inference_request: InferenceRequest | None = None, raise_on_error: bool = True,
                    **kwargs: Any) -> AsyncResponseIterator:
        """Send a request from a running asyncio loop (a coroutine, a Jupyter cell with
        ``async for``); the errors of :meth:`infer` come from the first ``__anext__``."""
        if inference_request is None:
            inference_request = InferenceRequest(model=self, **kwargs)
        return AsyncResponseIterator(self, inference_request, raise_on_error)

    def metadata(self) -> dict[str, Any]:
        """Triton's model metadata (name, versions, platform, inputs, outputs)."""
        return dict(self.server.run(self.server.engine.model_metadata(self.name, self._version)))

    def ready(self) -> bool:
        """True when the model (version) is READY; False for unknown ones, as Triton's."""
        try:
            return self.server.run(self.server.engine.model_ready(self.name, self._version))
        except WorkbenchError:
            return False

    def config(self, config_version: int = 1) -> dict[str, Any]:
        """The served model configuration as Triton's JSON (after auto-complete)."""
        return model_config_to_json(self.server.run(self.server.engine.model_config(self.name, self._version)))

    def statistics(self) -> dict[str, Any]:
        """Triton's statistics: ``{"model_stats": [...]}``."""
        return dict(self.server.run(self.server.engine.statistics(self.name, self._version)))

    def batch_properties(self) -> ModelBatchFlag:
        """``FIRST_DIM`` when the model batches (``max_batch_size > 0``), else ``UNKNOWN``."""
        return ModelBatchFlag.FIRST_DIM if self.config().get("max_batch_size", 0) > 0 else ModelBatchFlag.UNKNOWN

    def transaction_properties(self) -> ModelTxnPropertyFlag:
        """``DECOUPLED`` for a decoupled model, else ``ONE_TO_ONE``."""
        policy = self.config().get("model_transaction_policy", {})
        return ModelTxnPropertyFlag.DECOUPLED if policy.get("decoupled") else ModelTxnPropertyFlag.ONE_TO_ONE

    def __repr__(self) -> str:
        return str(self)

    def __str__(self) -> str:
        return str({"name": self.name, "version": self.version, "state": self.state})


__all__ = ["Model"]
