"""The one thing a load generator talks to: :class:`PerfClient`, and its in-process form.

A client reads a model's metadata, config and statistics, turns input tensors into a
request it can send many times (:meth:`PerfClient.prepare`, once per distinct request, off
the measured path) and sends it (:meth:`PerfClient.infer`). Three implementations:

* :class:`InProcessClient` calls a :class:`workbench.Server` running in this process
  (notebooks, the dashboard's Tuning panel): perf_analyzer's C API mode
  (``--service-kind=triton_c_api``), without any network or serialization;
* :class:`workbench.perf.remote.HttpClient` / :class:`~workbench.perf.remote.GrpcClient`
  speak the v2 protocol to a server over the network through tritonclient's asyncio clients
  (``-i http|grpc``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, cast

from workbench import InferenceRequest, Server, Tensor, model_config_to_json
from workbench.serving.live_stats import InProcessLoad


class PerfClient(Protocol):
    """What :func:`workbench.perf.run_step` and :func:`workbench.perf.sweep` need from a target.

    ``kind`` names the target in reports: ``"in-process"``, ``"http"`` or ``"grpc"``.
    Errors are the target's own (``workbench.WorkbenchError`` in process,
    ``tritonclient.utils.InferenceServerException`` or a connection error remotely); the
    measurement turns them into :class:`workbench.perf.PerfError` messages or failed-request
    counts. The client owns its connections; :meth:`close` releases them.
    """

    kind: str

    async def model_metadata(self, model: str, version: str) -> dict:
        """``GET /v2/models/<m>[/versions/<v>]`` as JSON (``inputs``: name, datatype, shape)."""
        ...

    async def model_config(self, model: str, version: str) -> dict:
        """The model config as Triton's ``/config`` JSON."""
        ...

    async def statistics(self, model: str, version: str) -> dict:
        """``{"model_stats": [...]}``, Triton's statistics extension (cumulative **ns**)."""
        ...

    def prepare(self, model: str, version: str, inputs: Sequence[Tensor]) -> object:
        """A request for ``model`` carrying ``inputs`` (shapes with batch dim), reusable for
        any number of concurrent :meth:`infer` calls; all outputs are asked for (binary)."""
        ...

    async def infer(self, request: object) -> None:
        """Send a prepared request and wait for its response (the outputs are dropped)."""
        ...

    async def close(self) -> None:
        """Release connections; the client is unusable afterwards."""
        ...


class InProcessClient:
    """A :class:`PerfClient` over a :class:`workbench.Server` in this process.

    The load generator then shares the server's event loop: at high request rates its own
    bookkeeping (a few µs per request) competes with the engine, as any in-process client's
    would. :meth:`close` leaves the server running (the caller owns it).
    """

    kind = "in-process"

    def __init__(self, server: Server) -> None:
        self.server = server

    async def model_metadata(self, model: str, version: str) -> dict:
        return dict(await self.server.model_metadata(model, version))  # a plain dict, as the remote clients give

    async def model_config(self, model: str, version: str) -> dict:
        return model_config_to_json(await self.server.model_config(model, version))

    async def statistics(self, model: str, version: str) -> dict:
        return dict(await self.server.statistics(model, version))  # a plain dict, as the remote clients give

    def prepare(self, model: str, version: str, inputs: Sequence[Tensor]) -> object:
        return (model, version, list(inputs))

    async def infer(self, request: object) -> None:
        model, version, inputs = cast("tuple[str, str, list[Tensor]]", request)  # what prepare() made
        # a fresh request object each time: the engine owns a request while it runs; marked
        # in-process, so the Live tab plots the sweep apart from network traffic
        with InProcessLoad(self.server):
            await self.server.infer(InferenceRequest(model, list(inputs), model_version=version))

    async def close(self) -> None:
        return None
