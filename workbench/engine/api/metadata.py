"""What the server's metadata methods report (KServe v2 ``GET /v2`` and
``GET /v2/models/<m>[/versions/<v>]``, gRPC ``ServerMetadata`` and ``ModelMetadata``)."""

from __future__ import annotations

from workbench._version import __version__
from workbench.common.results import ModelMetadata, ServerMetadata
from workbench.engine.models.lifecycle import ModelLifecycle

#: Triton protocol extensions this server implements (``GET /v2`` and gRPC ``ServerMetadata``
#: list them): tritonserver 2.5x's whole list (core ``server.cc``), in its order; every one is
#: implemented here (``sequence``: the sequence batcher; ``schedule_policy``: dynamic batching
#: queue policies; ``cuda_shared_memory`` answers "GPUs not supported" where none is found).
EXTENSIONS = [
    "classification",
    "sequence",
    "model_repository",
    "model_repository(unload_dependents)",
    "schedule_policy",
    "model_configuration",
    "system_shared_memory",
    "cuda_shared_memory",
    "binary_tensor_data",
    "parameters",
    "statistics",
    "trace",
    "logging",
]


def server_metadata(server_id: str) -> ServerMetadata:
    """``{"name": server_id, "version", "extensions": EXTENSIONS}``."""
    return {"name": server_id, "version": __version__, "extensions": EXTENSIONS}


def model_metadata(lifecycle: ModelLifecycle, name: str, version: str = "") -> ModelMetadata:
    """Name, versions (the READY ones, or only ``version`` when given), platform (the
    config's ``platform``, else its ``backend``), inputs and outputs of a READY version.

    Raises:
        ModelNotFound / ModelNotReady: as :meth:`ModelLifecycle.resolve`.
    """
    model = lifecycle.resolve(name, version)
    inputs, outputs = model.io.metadata()
    ready = lifecycle.models[name].ready_versions()
    versions = [str(v) for v in ready] if version in ("", "-1") else [version]
    return {"name": name, "versions": versions, "platform": model.config.platform or model.config.backend,
            "inputs": inputs, "outputs": outputs}


__all__ = ["EXTENSIONS", "model_metadata", "server_metadata"]
