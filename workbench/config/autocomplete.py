"""Auto-complete a model config from the model's files (TRITON_COMPAT §3).

Two stages, as in Triton:

1. Server side (core ``AutoCompleteBackendFields``): ``name`` from the model
   directory, and ``backend`` / ``platform`` / ``default_model_filename`` from
   each other or from the file names in the lowest version folder. Triton runs
   this stage even with ``--strict-model-config=true``.
2. Backend side (onnxruntime backend ``AutoCompleteConfig``): for ONNX models,
   ``max_batch_size``, ``dynamic_batching`` and the inputs / outputs from the
   graph (see :mod:`workbench.config.onnx_autocomplete`); for Python models,
   the model's own ``auto_complete_config`` (see
   :mod:`workbench.config.python_autocomplete`); for TensorRT plans, max_batch_size and the
   inputs / outputs from the engine (:mod:`workbench.config.tensorrt_plan`; needs
   ``tensorrt`` and a GPU, else a warning); for DALI pipelines, inputs, outputs and
   max_batch_size from what the serialized pipeline declares
   (:mod:`workbench.config.dali_autocomplete`). Skipped when strict. PyTorch
   (TorchScript) models cannot be auto-completed: like Triton, only a warning when
   their inputs or outputs are missing (the load then fails, naming them).

Both stages read the backend table (:mod:`workbench.config.backend_specs`): its rows'
model files in Triton's order for stage 1, and each row's ``autocomplete`` hook for stage 2.
"""

from __future__ import annotations

from pathlib import Path

from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.common.errors import InvalidModelConfig
from workbench.config.backend_specs import (
    AutocompleteOptions,
    ModelFile,
    backend_spec,
    backend_specs,
)
from workbench.config.paths import stays_inside
from workbench.config.python_based import PYTHON_FILENAME, python_based_model_file
from workbench.config.versions import scan_version_dirs

ENSEMBLE_PLATFORM = "ensemble"


def autocomplete_model_config(
    config: ModelConfig | None,
    model_name: str,
    model_dir: Path,
    *,
    strict: bool = False,
    default_max_batch_size: int = 4,
    backend_directory: str = "",
) -> ModelConfig:
    """Fill what Triton's auto-complete fills; never mutates ``config``.

    As tritonserver: ``name`` defaults to the directory name; backend, platform and default model
    filename come from each other or from the lowest version folder's files (``model.onnx``,
    ``model.py``, ``model.pt``, ``model.plan``, ``model.xml``, a directory ``x.<backend>``).
    Unless ``strict``, an onnxruntime model gets max_batch_size, dynamic batching and its
    inputs/outputs from its ONNX graph, and a python model what its ``auto_complete_config``
    sets (run in a separate process). Docs: docs/backends.md (each backend's auto-complete).

    Args:
        config: the parsed config.pbtxt, or None when the model has none.
        model_name: the model's directory name.
        model_dir: the model's directory.
        strict: ``--strict-model-config=true`` / ``--disable-auto-complete-config``: a config
            file is required; only the backend fields are filled (as Triton does).
        default_max_batch_size: the onnxruntime ``default-max-batch-size`` backend config, for
            batchable graphs with ``max_batch_size`` 0.
        backend_directory: ``--backend-directory``: an unknown backend is Python-based when
            ``<backend_directory>/<backend>/model.py`` exists (:mod:`workbench.config.python_based`).

    Returns:
        A new, completed ``ModelConfig``.

    Raises:
        InvalidModelConfig: strict mode without a config file; no backend can be determined; the
            ONNX graph cannot be read or contradicts the config; ``auto_complete_config`` fails."""
    if config is None and strict:
        raise InvalidModelConfig(
            f"model configuration file is missing for model '{model_name}' in "
            f"'{model_dir}'; it is required when auto-complete is disabled "
            "(--strict-model-config=true)"
        )
    completed = ModelConfig()
    if config is not None:
        completed.CopyFrom(config)
    complete_backend_fields(completed, model_name, Path(model_dir))
    spec = backend_spec(completed.backend)
    if not strict and spec is not None and spec.autocomplete is not None:
        spec.autocomplete(completed, Path(model_dir), AutocompleteOptions(default_max_batch_size))
    based_on = python_based_model_file(completed, backend_directory) if spec is None else None
    if based_on is not None:  # Triton sets the runtime of a Python-based backend's model
        completed.runtime = PYTHON_FILENAME
        if not strict:
            from workbench.config.python_autocomplete import autocomplete_from_python

            autocomplete_from_python(completed, based_on, python_based=True)
    return completed


def complete_backend_fields(config: ModelConfig, model_name: str, model_dir: Path) -> None:
    """Fill name, backend, platform and default_model_filename in place.

    Follows Triton core's ``AutoCompleteBackendFields``: an explicit backend,
    platform or default_model_filename selects the known pair it belongs to;
    with none given, the first known model file (Triton's order) in the lowest
    version folder decides; with nothing at all, a directory named
    ``<x>.<backend>`` selects ``<backend>`` and ``model.<backend>``. Ensembles
    (platform ``ensemble``) are left alone.

    Args:
        config: the config to complete (mutated).
        model_name: the model's directory name.
        model_dir: the model's directory.

    Raises:
        InvalidModelConfig: when nothing identifies the backend (Triton's
            "Invalid model name: Could not determine backend for model ..."); a
            ``default_model_filename`` that leaves the version folder (absolute, ``..``:
            Triton joins it unchecked), before any file is looked at.
    """
    if not config.name:
        config.name = model_name
    filename = config.default_model_filename
    if filename and not stays_inside(filename):
        shown = filename.replace("\0", "\\0")
        raise InvalidModelConfig(
            f"default_model_filename '{shown}' of model '{config.name}' must name a file inside "
            "the version folder (no absolute path, '.' or '..')"
        )
    if config.platform == ENSEMBLE_PLATFORM:
        return
    match = _match_declared(config) or _match_files(config, model_dir)
    if match is None:
        if not (config.backend or config.platform or config.default_model_filename):
            _complete_custom_backend(config, model_name)
        return
    backend, entry = match
    if not config.backend:
        config.backend = backend
    if not config.platform and config.backend == backend:
        config.platform = entry.platform
    if not config.default_model_filename:
        config.default_model_filename = entry.filename


def _known_files() -> list[tuple[str, ModelFile]]:
    """(backend, model file) pairs of the backend table, in Triton's detection order."""
    return [(spec.name, entry) for spec in backend_specs() for entry in spec.files]


def _match_declared(config: ModelConfig) -> tuple[str, ModelFile] | None:
    """The known pair selected by an explicit backend, platform or model filename."""
    candidates = _known_files()
    if config.backend:
        candidates = [c for c in candidates if c[0] == config.backend]
        if not candidates:
            return None
    for backend, entry in candidates:
        if config.platform and config.platform in (entry.platform, *entry.aliases):
            return backend, entry
        if config.default_model_filename == entry.filename:
            return backend, entry
    if config.backend:
        return candidates[0]
    return None


def _match_files(config: ModelConfig, model_dir: Path) -> tuple[str, ModelFile] | None:
    """The first known model file in the lowest version folder (only when nothing is declared)."""
    if config.backend or config.platform or config.default_model_filename:
        return None
    versions = scan_version_dirs(model_dir, warn=False)
    if not versions:
        return None
    version_dir = versions[min(versions)]
    for backend, entry in _known_files():
        path = version_dir / entry.filename
        if entry.kind == "file" and path.is_file():
            return backend, entry
        if entry.kind == "dir" and path.is_dir():
            return backend, entry
        if entry.kind == "any" and path.exists():
            return backend, entry
    return None


def _complete_custom_backend(config: ModelConfig, model_name: str) -> None:
    """``<x>.<backend>`` model directory -> backend ``<backend>``, file ``model.<backend>``."""
    _, dot, backend = model_name.partition(".")
    if not dot:
        raise InvalidModelConfig(
            f"Invalid model name: Could not determine backend for model '{model_name}' "
            "with no backend in model configuration. Expected model name of the form "
            "'model.<backend_name>'."
        )
    config.backend = backend
    config.default_model_filename = f"model.{backend}"


__all__ = [
    "ENSEMBLE_PLATFORM",
    "autocomplete_model_config",
    "complete_backend_fields",
]
