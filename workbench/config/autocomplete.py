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
   ``tensorrt`` and a GPU, else a warning). Skipped when strict. PyTorch
   (TorchScript) models cannot be auto-completed: like Triton, only a warning when
   their inputs or outputs are missing (the load then fails, naming them).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.config.paths import stays_inside
from workbench.config.versions import scan_version_dirs, select_versions
from workbench.errors import InvalidModelConfig

logger = logging.getLogger(__name__)

ENSEMBLE_PLATFORM = "ensemble"


@dataclass(frozen=True)
class BackendFiles:
    """One known backend/platform pair and the model file that identifies it.

    Attributes:
        backend: backend name (``onnxruntime``).
        platform: platform name (``onnxruntime_onnx``), or "" when the backend has none.
        filename: the default model file name (``model.onnx``).
        kind: what the file must be to count: ``"file"``, ``"dir"`` or ``"any"``.
        aliases: other platform names meaning the same pair.
    """

    backend: str
    platform: str
    filename: str
    kind: str = "file"
    aliases: tuple[str, ...] = ()


#: Triton's detection order (core ``AutoCompleteBackendFields``).
KNOWN_BACKEND_FILES: tuple[BackendFiles, ...] = (
    BackendFiles("tensorflow", "tensorflow_savedmodel", "model.savedmodel", "dir"),
    BackendFiles("tensorflow", "tensorflow_graphdef", "model.graphdef", "file"),
    BackendFiles("tensorrt", "tensorrt_plan", "model.plan", "file"),
    BackendFiles("onnxruntime", "onnxruntime_onnx", "model.onnx", "any"),
    BackendFiles("openvino", "", "model.xml", "any"),
    BackendFiles("pytorch", "pytorch_libtorch", "model.pt", "file", ("libtorch",)),
    BackendFiles("pytorch", "torch_aoti", "model.pt2", "file"),
    BackendFiles("python", "", "model.py", "any"),
)


def autocomplete_model_config(
    config: ModelConfig | None,
    model_name: str,
    model_dir: Path,
    *,
    strict: bool = False,
    default_max_batch_size: int = 4,
) -> ModelConfig:
    """Fill what Triton's auto-complete fills; never mutates ``config``.

    Follows tritonserver: ``name`` defaults to the directory name; backend,
    platform and default model filename are derived from each other or from the
    files in the lowest version folder (``model.onnx`` -> onnxruntime /
    onnxruntime_onnx, ``model.py`` -> python, ``model.pt`` -> pytorch /
    pytorch_libtorch, ``model.plan`` -> tensorrt / tensorrt_plan, ``model.xml``
    -> openvino, a directory named ``x.<backend>`` -> ``<backend>``). Unless
    ``strict``, an onnxruntime model then gets max_batch_size, dynamic batching
    and inputs/outputs from its ONNX graph like the onnxruntime backend does,
    and a python model whatever its ``auto_complete_config`` sets (run in a
    separate process, as Triton's python backend does).

    Args:
        config: the parsed config.pbtxt, or None when the model has none.
        model_name: the model's directory name.
        model_dir: the model's directory.
        strict: tritonserver ``--strict-model-config=true`` /
            ``--disable-auto-complete-config``: a config file is required and
            nothing is read from the model files except for the backend fields
            (which Triton fills even in strict mode).
        default_max_batch_size: the onnxruntime ``default-max-batch-size``
            backend config used for batchable graphs with ``max_batch_size`` 0.

    Returns:
        A new, completed ``ModelConfig``.

    Raises:
        InvalidModelConfig: strict mode without a config file; no backend can be
            determined; the ONNX graph cannot be read or contradicts the config; a
            python model's ``auto_complete_config`` fails.
    """
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
    if not strict and completed.backend == "onnxruntime":
        model_file = _find_model_file(completed, Path(model_dir))
        if model_file is not None:
            from workbench.config.onnx_autocomplete import autocomplete_from_onnx

            autocomplete_from_onnx(completed, model_file, default_max_batch_size)
    if not strict and completed.backend == "python":
        _autocomplete_python(completed, Path(model_dir))
    if not strict and completed.backend == "tensorrt":
        _autocomplete_tensorrt(completed, Path(model_dir))
    if not strict and completed.backend == "pytorch" and not (completed.input and completed.output):
        # TorchScript files hold no input/output metadata; Triton's pytorch backend only warns
        # and its load then fails on the missing inputs/outputs (so does ours, saying why)
        logger.warning(
            "skipping model configuration auto-complete for '%s': not supported for pytorch backend",
            completed.name,
        )
    return completed


def _autocomplete_python(config: ModelConfig, model_dir: Path) -> None:
    """Run the model's ``auto_complete_config`` when a version holds its model file (a missing
    file is the backend's load error, with its own message)."""
    try:
        model_file = _find_model_file(config, model_dir)
    except InvalidModelConfig:
        return
    if model_file is not None:
        from workbench.config.python_autocomplete import autocomplete_from_python

        autocomplete_from_python(config, model_file)


def _autocomplete_tensorrt(config: ModelConfig, model_dir: Path) -> None:
    """Read the plan's inputs, outputs and profiles (needs ``tensorrt`` and a GPU, else only a
    warning); a missing plan file is the backend's load error."""
    try:
        model_file = _find_model_file(config, model_dir)
    except InvalidModelConfig:
        return
    if model_file is not None:
        from workbench.config.tensorrt_plan import autocomplete_from_plan

        autocomplete_from_plan(config, model_file)


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
    entry = _match_declared(config) or _match_files(config, model_dir)
    if entry is None:
        if not (config.backend or config.platform or config.default_model_filename):
            _complete_custom_backend(config, model_name)
        return
    if not config.backend:
        config.backend = entry.backend
    if not config.platform and config.backend == entry.backend:
        config.platform = entry.platform
    if not config.default_model_filename:
        config.default_model_filename = entry.filename


def _match_declared(config: ModelConfig) -> BackendFiles | None:
    """The known pair selected by an explicit backend, platform or model filename."""
    candidates = KNOWN_BACKEND_FILES
    if config.backend:
        candidates = tuple(e for e in candidates if e.backend == config.backend)
        if not candidates:
            return None
    for entry in candidates:
        if config.platform and config.platform in (entry.platform, *entry.aliases):
            return entry
        if config.default_model_filename == entry.filename:
            return entry
    if config.backend:
        return candidates[0]
    return None


def _match_files(config: ModelConfig, model_dir: Path) -> BackendFiles | None:
    """The first known model file in the lowest version folder (only when nothing is declared)."""
    if config.backend or config.platform or config.default_model_filename:
        return None
    versions = scan_version_dirs(model_dir, warn=False)
    if not versions:
        return None
    version_dir = versions[min(versions)]
    for entry in KNOWN_BACKEND_FILES:
        path = version_dir / entry.filename
        if entry.kind == "file" and path.is_file():
            return entry
        if entry.kind == "dir" and path.is_dir():
            return entry
        if entry.kind == "any" and path.exists():
            return entry
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


def _find_model_file(config: ModelConfig, model_dir: Path) -> Path | None:
    """The model file whose graph auto-complete reads.

    The newest version the version policy serves that holds the file (the one
    clients reach by default). None when the model has no version folder at all
    (loading then fails with Triton's "no version is available").

    Raises:
        InvalidModelConfig: versions exist but none of them holds the file.
    """
    versions = scan_version_dirs(model_dir, warn=False)
    if not versions:
        return None
    selected = select_versions(config, versions) or sorted(versions)
    for version in reversed(selected):
        path = versions[version] / str(config.default_model_filename)
        if path.exists():
            return path
    raise InvalidModelConfig(
        f"autofill failed for model '{config.name}': unable to find "
        f"'{config.default_model_filename}' in any version directory of '{model_dir}'"
    )


__all__ = [
    "BackendFiles",
    "KNOWN_BACKEND_FILES",
    "ENSEMBLE_PLATFORM",
    "autocomplete_model_config",
    "complete_backend_fields",
]
