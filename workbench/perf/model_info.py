"""What a load generator needs to know about a model, read from its metadata and config.

Both come through the client (``GET /v2/models/<m>`` and ``/config``, their gRPC twins, or
``Server.model_metadata`` / ``Server.model_config`` in process), as perf_analyzer's
``ModelParser`` reads them. gRPC's JSON renders 64-bit integers as strings; they are read
back as ints here.
"""

from __future__ import annotations

from dataclasses import dataclass

from workbench.perf.errors import PerfError


@dataclass(frozen=True, slots=True)
class InputSpec:
    """One model input.

    Attributes:
        name: the input's name.
        datatype: its wire datatype (``"FP32"``, ``"INT64"``, ``"BYTES"``...).
        dims: its shape without the batch dimension; ``-1`` marks a dynamic dim.
        optional: the config marks it optional (still sent when data is given).
    """

    name: str
    datatype: str
    dims: tuple[int, ...]
    optional: bool = False


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """A model as a load generator sees it.

    Attributes:
        name, version: the model and the version asked for (``""`` = latest ready).
        max_batch_size: from the config; 0 = the model takes no batch dimension.
        inputs: its inputs, in metadata order.
        response_cache: ``response_cache { enable: true }`` (perf_analyzer then adds the
            ``Server Cache Hit`` / ``Server Cache Miss`` CSV columns).
        ensemble: the model is an ensemble (``platform: "ensemble"``).
    """

    name: str
    version: str
    max_batch_size: int
    inputs: tuple[InputSpec, ...]
    response_cache: bool = False
    ensemble: bool = False

    @classmethod
    def from_json(cls, name: str, version: str, metadata: dict, config: dict) -> ModelInfo:
        """Read a model's metadata and config (Triton's JSON forms).

        Args:
            metadata: ``{"inputs": [{"name", "datatype", "shape"}], ...}``; shapes include a
                leading -1 when the model batches.
            config: the model config JSON (``max_batch_size``, ``input`` with ``optional``,
                ``response_cache``, ``sequence_batching``, ``model_transaction_policy``);
                gRPC's ``{"config": {...}}`` wrapper is accepted too.

        Raises:
            PerfError: a sequence model or a decoupled model (perf_analyzer measures those
                with sequence ids and streaming, which ``workbench perf`` does not do), or
                metadata without inputs.
        """
        config = config.get("config", config)
        if "sequence_batching" in config:
            raise PerfError(f"model '{name}' uses the sequence batcher; workbench perf does not "
                            "send sequences (correlation ids, start/end flags)")
        if config.get("model_transaction_policy", {}).get("decoupled"):
            raise PerfError(f"model '{name}' is decoupled; workbench perf measures "
                            "request/response models only (no streaming)")
        max_batch_size = int(config.get("max_batch_size", 0))
        optional = {i["name"] for i in config.get("input", []) if i.get("optional")}
        inputs = tuple(
            _input_spec(entry, max_batch_size, entry["name"] in optional)
            for entry in metadata.get("inputs", [])
        )
        if not inputs:
            raise PerfError(f"model '{name}' has no inputs in its metadata")
        return cls(
            name=name,
            version=version,
            max_batch_size=max_batch_size,
            inputs=inputs,
            response_cache=bool(config.get("response_cache", {}).get("enable")),
            ensemble=config.get("platform") == "ensemble" or "ensemble_scheduling" in config,
        )


def _input_spec(entry: dict, max_batch_size: int, optional: bool) -> InputSpec:
    shape = tuple(int(d) for d in entry.get("shape", []))
    dims = shape[1:] if max_batch_size > 0 else shape
    return InputSpec(entry["name"], entry["datatype"], dims, optional)
