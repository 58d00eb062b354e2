"""The one table of the backends this server knows: a new backend is its class and one row.

Each :class:`BackendSpec` row says what Triton's core and the backend itself know about a
backend: its name, its platforms and the model file that identifies each (Triton core's
``AutoCompleteBackendFields`` order), the backend's auto-complete, the defaults its instance
groups get (``NormalizeInstanceGroup``), and the :class:`~workbench.backends.base.Backend`
class that serves it, *by name* (``"module:Class"``): this layer never imports a backend.

Read by auto-complete (:mod:`.autocomplete`: backend / platform / default_model_filename and
the backend's own auto-complete), validation (:mod:`.validate`: backend-platform pairs, the
backends known by default), normalization (:mod:`.normalize`: KIND_AUTO and default instance
counts) and the backends' registry (``workbench.backends.registry``: the class of a row, the
backend of a platform). A row without a class would be a backend Triton knows and this
server does not serve (keeping Triton's detection order and pair checks); the tensorflow row
serves SavedModels and fails GraphDef loads with a clear error.

:func:`add_backend_spec` adds a row at run time (plugins, tests); rows added later are
detected after the built-in ones.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.common.errors import InvalidModelConfig
from workbench.config.versions import find_model_file
from workbench.files.model_files import read_text

#: the hooks' messages are auto-complete's (its logger name, as before the table existed)
logger = logging.getLogger("workbench.config.autocomplete")


@dataclass(frozen=True)
class ModelFile:
    """One platform of a backend and the model file in a version folder that identifies it.

    Attributes:
        filename: the default model file name (``model.onnx``); the first file of a row is
            its ``default_model_filename``.
        platform: the platform name (``onnxruntime_onnx``), "" when the backend has none.
        kind: what the path must be to count: ``"file"``, ``"dir"`` or ``"any"``.
        aliases: other platform names meaning the same pair (``libtorch``).
    """

    filename: str
    platform: str = ""
    kind: str = "file"
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True)
class AutocompleteOptions:
    """Server settings a backend's auto-complete reads (Triton's ``--backend-config``).

    Attributes:
        default_max_batch_size: onnxruntime ``default-max-batch-size``, for batchable graphs
            whose config says ``max_batch_size: 0``; the tensorflow auto-complete reads the
            same value (Triton's tensorflow default is 4 too; its own
            ``tensorflow,default-max-batch-size`` is not a separate setting here).
    """

    default_max_batch_size: int = 4


#: ``hook(config, model_dir, options)``: complete ``config`` (mutated; backend fields already
#: filled) from the model's files, as the backend's ``AutoCompleteConfig`` does. Not called
#: with ``--strict-model-config=true``. Raises InvalidModelConfig for a file that
#: contradicts the config.
AutocompleteHook = Callable[[ModelConfig, Path, AutocompleteOptions], None]


@dataclass(frozen=True)
class BackendSpec:
    """One backend (one row of the table).

    Attributes:
        name: the config's ``backend`` value (``onnxruntime``).
        files: its platforms and model files, in Triton's detection order; empty for a
            backend no file identifies (``<x>.<backend>`` folders still select it).
        backend_class: ``"module:Class"`` of the :class:`~workbench.backends.base.Backend`
            subclass serving it, imported by the registry; "" = known but not served here.
        autocomplete: the backend's auto-complete (:data:`AutocompleteHook`), or None.
        gpu_capable: KIND_AUTO instance groups go on a GPU when one exists (Triton core's
            normalization lists these backends).
        cpu_instance_count: default ``count`` of a KIND_CPU group (Triton: 2 for
            onnxruntime and tensorflow, else 1).
    """

    name: str
    files: tuple[ModelFile, ...] = ()
    backend_class: str = ""
    autocomplete: AutocompleteHook | None = None
    gpu_capable: bool = False
    cpu_instance_count: int = 1

    @property
    def platforms(self) -> frozenset[str]:
        """Every platform name (aliases included) that pairs with this backend; empty when
        the backend accepts any platform (Triton's ``GetBackendType`` fixes none)."""
        return frozenset(p for f in self.files for p in (f.platform, *f.aliases) if p)

    @property
    def default_model_filename(self) -> str:
        """The model file of the backend's first platform ("" for a row without files):
        what auto-complete fills when a config names the backend and nothing else."""
        return self.files[0].filename if self.files else ""


def _onnx_autocomplete(config: ModelConfig, model_dir: Path, options: AutocompleteOptions) -> None:
    """Inputs, outputs and batching from the ONNX graph (a version without the file fails)."""
    model_file = find_model_file(config, model_dir)
    if model_file is not None:
        from workbench.config.onnx_autocomplete import autocomplete_from_onnx

        autocomplete_from_onnx(config, model_file, options.default_max_batch_size)


def _python_autocomplete(config: ModelConfig, model_dir: Path, _: AutocompleteOptions) -> None:
    """The model's ``auto_complete_config``, when a version holds its model file (a missing
    file is the backend's load error, with its own message)."""
    model_file = _model_file_or_none(config, model_dir)
    if model_file is not None:
        from workbench.config.python_autocomplete import autocomplete_from_python

        autocomplete_from_python(config, model_file)


def _tensorrt_autocomplete(config: ModelConfig, model_dir: Path, _: AutocompleteOptions) -> None:
    """The plan's inputs, outputs and profiles (needs ``tensorrt`` and a GPU, else only a
    warning); a missing plan file is the backend's load error."""
    model_file = _model_file_or_none(config, model_dir)
    if model_file is not None:
        from workbench.config.tensorrt_plan import autocomplete_from_plan

        autocomplete_from_plan(config, model_file)


def _pytorch_autocomplete(config: ModelConfig, _: Path, __: AutocompleteOptions) -> None:
    """TorchScript files hold no input/output metadata; Triton's pytorch backend only warns
    and its load then fails on the missing inputs/outputs (so does ours, saying why)."""
    if not (config.input and config.output):
        logger.warning(
            "skipping model configuration auto-complete for '%s': not supported for pytorch backend",
            config.name,
        )


def _tensorflow_autocomplete(config: ModelConfig, model_dir: Path,
                             options: AutocompleteOptions) -> None:
    """Inputs, outputs and batching from a SavedModel's signature (GraphDef files carry no
    metadata: nothing to do, as Triton); a version without the SavedModel is the backend's
    load error."""
    if config.platform == "tensorflow_graphdef":
        return
    model_file = _model_file_or_none(config, model_dir)
    if model_file is None or not model_file.is_dir():
        return
    from workbench.config.tensorflow_signature import autocomplete_from_savedmodel

    try:
        autocomplete_from_savedmodel(config, model_file, options.default_max_batch_size)
    except ImportError:  # no tensorflow: the backend's load says what to install
        logger.warning("skipping model configuration auto-complete for '%s': tensorflow is "
                       "not installed", config.name)
def _dali_autocomplete(config: ModelConfig, model_dir: Path, _: AutocompleteOptions) -> None:
    """Inputs, outputs, max_batch_size and dynamic batching from the serialized pipeline (what
    it declares), as Triton's dali_backend; a missing model.dali is the backend's load error."""
    model_file = _model_file_or_none(config, model_dir)
    if model_file is not None and model_file.suffix != ".py":  # a .py is autoserialized at load
        from workbench.config.dali_autocomplete import autocomplete_from_dali

        try:
            text: str | None = read_text(model_dir / "config.pbtxt")
        except OSError:  # none (or unreadable: then the load reports it)
            text = None
        autocomplete_from_dali(config, model_file, text)


def _model_file_or_none(config: ModelConfig, model_dir: Path) -> Path | None:
    try:
        return find_model_file(config, model_dir)
    except InvalidModelConfig:
        return None


#: the built-in rows, in Triton's detection order (core ``AutoCompleteBackendFields``).
BUILTIN_BACKENDS: tuple[BackendSpec, ...] = (
    BackendSpec("tensorflow", (ModelFile("model.savedmodel", "tensorflow_savedmodel", "dir"),
                               ModelFile("model.graphdef", "tensorflow_graphdef")),
                "workbench.backends.tensorflow:TensorFlowBackend", _tensorflow_autocomplete,
                gpu_capable=True, cpu_instance_count=2),
    BackendSpec("tensorrt", (ModelFile("model.plan", "tensorrt_plan"),),
                "workbench.backends.tensorrt:TensorRTBackend", _tensorrt_autocomplete,
                gpu_capable=True),
    BackendSpec("onnxruntime", (ModelFile("model.onnx", "onnxruntime_onnx", "any"),),
                "workbench.backends.onnxruntime:OnnxRuntimeBackend", _onnx_autocomplete,
                gpu_capable=True, cpu_instance_count=2),
    BackendSpec("openvino", (ModelFile("model.xml", kind="any"),),
                "workbench.backends.openvino:OpenVinoBackend"),
    # no model file: Triton's core detects no fil model from its files, and FIL itself picks
    # the file from the model_type parameter (workbench.backends.fil_options.MODEL_FILES);
    # GPU FIL is not served, so KIND_AUTO stays on CPU
    BackendSpec("fil", (), "workbench.backends.fil:FilBackend"),
    BackendSpec("pytorch", (ModelFile("model.pt", "pytorch_libtorch", aliases=("libtorch",)),
                            ModelFile("model.pt2", "torch_aoti")),
                "workbench.backends.pytorch:PyTorchBackend", _pytorch_autocomplete,
                gpu_capable=True),
    BackendSpec("python", (ModelFile("model.py", kind="any"),),
                "workbench.backends.python:PythonBackend", _python_autocomplete,
                gpu_capable=True),
    # Triton's dali_backend: a serialized pipeline; no platform name
    BackendSpec("dali", (ModelFile("model.dali"),), "workbench.backends.dali:DaliBackend",
                _dali_autocomplete, gpu_capable=True),
)

_table: tuple[BackendSpec, ...] = BUILTIN_BACKENDS
_lock = threading.Lock()


def backend_specs() -> tuple[BackendSpec, ...]:
    """Every row: the built-in ones in Triton's detection order, then the added ones."""
    return _table


def backend_spec(name: str) -> BackendSpec | None:
    """The row of backend ``name``, or None for a backend the table does not know."""
    return next((spec for spec in _table if spec.name == name), None)


def backend_of_platform(platform: str) -> str:
    """The served backend a platform name implies (Triton's legacy ``platform`` field:
    ``onnxruntime_onnx`` -> ``onnxruntime``), or "" for none."""
    for spec in _table:
        if spec.backend_class and platform in spec.platforms:
            return spec.name
    return ""


def served_backend_specs() -> tuple[BackendSpec, ...]:
    """The rows this server can serve (those naming a backend class)."""
    return tuple(spec for spec in _table if spec.backend_class)


def add_backend_spec(spec: BackendSpec) -> None:
    """Add a row (a plugin's or a test's backend); detected after the existing rows.

    Raises:
        ValueError: a row for ``spec.name`` exists already.
    """
    global _table
    with _lock:
        if backend_spec(spec.name) is not None:
            raise ValueError(f"backend '{spec.name}' is in the backend table already")
        _table = (*_table, spec)


def remove_backend_spec(name: str) -> None:
    """Remove the row of backend ``name`` (no-op when absent)."""
    global _table
    with _lock:
        _table = tuple(spec for spec in _table if spec.name != name)


__all__ = [
    "BUILTIN_BACKENDS",
    "AutocompleteHook",
    "AutocompleteOptions",
    "BackendSpec",
    "ModelFile",
    "add_backend_spec",
    "backend_of_platform",
    "backend_spec",
    "backend_specs",
    "remove_backend_spec",
    "served_backend_specs",
]
