"""A loaded model version: its config, tensor specs, scheduler and statistics (Triton's Model)."""

from __future__ import annotations

from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.engine.model_io import ModelIO
from workbench.engine.validation import validate_request
from workbench.scheduling.base import Scheduler
from workbench.statistics import ModelStatistics
from workbench.types import InferenceRequest, InferenceResponse, Tensor


class LoadedModel:
    """One READY version of a model. Owns exactly one scheduler.

    Args:
        config: the normalized, validated model config.
        version: version number (the version folder's name).
        scheduler: the scheduler that owns this version's instances.
        statistics: this version's counters (also given to the scheduler).
    """

    def __init__(
        self, config: ModelConfig, version: int, scheduler: Scheduler, statistics: ModelStatistics
    ) -> None:
        self.config = config
        self.version = version
        self.version_str = str(version)
        self.io = ModelIO(config)
        self.scheduler = scheduler
        self.statistics = statistics

    @property
    def name(self) -> str:
        return self.config.name

    async def infer(self, request: InferenceRequest, arrival_ns: int) -> InferenceResponse:
        """Validate, queue and run ``request``; outputs come back in requested order.

        Raises:
            InvalidArgument: the request does not match the model config (Triton's texts).
            WorkbenchError: the execution failed.
        """
        try:
            backend_request = validate_request(request, self.io)
        except Exception:
            import time

            self.statistics.record_failure(time.monotonic_ns() - arrival_ns, "OTHER")
            raise
        result = await self.scheduler.enqueue(backend_request, arrival_ns)
        params = {o.name: o.parameters for o in request.outputs or ()}
        outputs = [
            Tensor(name, self.io.outputs[name].wire, result.outputs[name], params.get(name, {}))
            for name in backend_request.requested_outputs
            if name in result.outputs
        ]
        return InferenceResponse(self.name, self.version_str, outputs, request.id)

    async def stop(self) -> None:
        """Finish queued and executing requests, then unload the instances."""
        await self.scheduler.stop()
