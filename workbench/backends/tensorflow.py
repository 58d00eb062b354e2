"""TensorFlow backend (``platform: "tensorflow_savedmodel"``), on CPU with ``tensorflow-cpu``.

Follows Triton's tensorflow_backend: ``<version>/model.savedmodel/`` (or
``default_model_filename``), the meta graph of ``TF_GRAPH_TAG`` (default ``serve``) and the
signature ``TF_SIGNATURE_DEF`` (default ``serving_default``;
:mod:`workbench.config.tensorflow_signature`); config tensors are the signature's keys.
``tensorflow`` is imported on the first load. GraphDef models fail their load, saying so.

``TF_NUM_INTRA_THREADS`` / ``TF_NUM_INTER_THREADS``: TF2 keeps one pair of pools per process,
fixed when TensorFlow first runs, so the first model that sets them wins
(:func:`apply_thread_settings`), later ones load with a warning. ``TF_USE_PER_SESSION_THREADS``,
``MAX_SESSION_SHARE_COUNT``, ``TF_INIT_OPS_FILE`` are accepted and ignored.

Load errors (UNAVAILABLE with the reason): no TensorFlow, GraphDef, KIND_GPU without a GPU, a
missing SavedModel, tag or signature, a config tensor the signature lacks, another input
count, datatype or shape (Triton's ``ValidateTensorFlowModel`` / ``CompareDims`` texts). A
batch is concatenated along the batch dimension, run once and split back
(:mod:`workbench.backends.batching`). Docs: docs/backends.md, **TensorFlow SavedModel**."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tritonclient.grpc.model_config_pb2 import DataType, ModelConfig

from workbench.backends.base import (
    Backend,
    BackendRequest,
    BackendResponse,
    ExecutionTimes,
    InstanceSpec,
    ModelInstance,
)
from workbench.backends.batching import gather_inputs, requested_union, split_outputs
from workbench.backends.ragged import check_ragged_input
from workbench.common.errors import InternalError, ModelLoadError
from workbench.config.batch_io import BatchLayout, batch_layout
from workbench.config.tensorflow_signature import (
    DEFAULT_TAG,
    Signature,
    TfTensor,
    import_tensorflow,
    parameter,
    read_signature,
)

logger = logging.getLogger(__name__)

INSTALL_HINT = "pip install 'workbench[tensorflow]'"
_threads_lock = threading.Lock()


class TensorFlowBackend(Backend):
    """Creates :class:`TensorFlowInstance` objects."""

    #: libtriton before tensorflow, when torch's triton is installed (a missing one is skipped):
    #: the loader imports these in order, and libtriton after TensorFlow crashes the process
    #: (see :func:`~workbench.config.tensorflow_signature.import_tensorflow`)
    framework_modules = ("triton._C.libtriton", "tensorflow")

    def load_instance(
        self, config: ModelConfig, version_dir: Path, spec: InstanceSpec
    ) -> ModelInstance:
        return TensorFlowInstance(config, version_dir, spec)


class TensorFlowInstance(ModelInstance):
    """One loaded SavedModel signature (a ``ConcreteFunction``), run eagerly.

    Inputs are fed by signature key (numpy arrays -> ``tf.Tensor``, BYTES as ``tf.string``);
    outputs come back as numpy arrays (``tf.string`` as object arrays of ``bytes``).

    Raises (at construction):
        ModelLoadError: see the module doc.
    """

    def __init__(self, config: ModelConfig, version_dir: Path, spec: InstanceSpec) -> None:
        super().__init__(spec)
        name = self._model_name = config.name
        filename = config.default_model_filename or "model.savedmodel"
        if config.platform == "tensorflow_graphdef" or filename.endswith(".graphdef"):
            raise ModelLoadError(
                f"unable to load model '{name}': TensorFlow GraphDef models "
                "(platform 'tensorflow_graphdef') are not served here; export the model as a "
                "SavedModel (model.savedmodel/, platform 'tensorflow_savedmodel')")
        try:
            tf = import_tensorflow()  # libtriton first: see import_tensorflow
        except ImportError:
            raise ModelLoadError(
                f"unable to load model '{name}': the tensorflow backend needs the 'tensorflow' "
                f"package (tensorflow-cpu); install it with `{INSTALL_HINT}`") from None
        self._tf = tf
        device = "/CPU:0"
        if spec.kind == "KIND_GPU":
            if not tf.config.list_physical_devices("GPU"):
                raise ModelLoadError(
                    f"unable to load model '{name}': instance group '{spec.group_name}' is "
                    "KIND_GPU but TensorFlow sees no GPU (tensorflow-cpu has no GPU support); "
                    "use KIND_CPU, or install the 'tensorflow' wheel with CUDA")
            device = f"/GPU:{spec.device_id}"  # not covered by the tests here (no GPU TF)
        self._device = device
        path = version_dir / filename
        if not path.is_dir():
            raise ModelLoadError(
                f"unable to load model '{name}', unable to find '{path}' (a SavedModel folder)")
        apply_thread_settings(tf, config)
        self._signature = read_signature(config, path)
        self._layout = batch_layout(config)
        _check_io(config, self._signature, self._layout)
        tag = parameter(config, "TF_GRAPH_TAG") or DEFAULT_TAG
        try:
            with tf.device(device):
                self._loaded = tf.saved_model.load(str(path), tags=[tag])
            self._function = self._loaded.signatures[self._signature.key]
        except (OSError, ValueError, RuntimeError, KeyError, tf.errors.OpError) as exc:
            raise ModelLoadError(
                f"unable to load model '{name}': {type(exc).__name__}: {exc}") from None
        self._inputs = [t.name for t in self._signature.inputs]
        self._outputs = [t.name for t in self._signature.outputs]
        self._string_inputs = {t.name for t in self._signature.inputs if t.tf_type == "DT_STRING"}

    def execute(
        self, requests: Sequence[BackendRequest], times: ExecutionTimes
    ) -> list[BackendResponse]:
        tf = self._tf
        names = requested_union(requests, self._outputs)
        feed, sizes = gather_inputs(requests, self._inputs, model=self._model_name,
                                    layout=self._layout)
        try:
            with tf.device(self._device):
                tensors = {k: tf.constant(v, dtype=tf.string) if k in self._string_inputs
                           else tf.constant(v) for k, v in feed.items()}
                times.mark_input_done()
                results = self._function(**tensors)
                outputs = {n: _to_numpy(results[n]) for n in names}
        except (tf.errors.OpError, ValueError, TypeError) as exc:  # TF's kernels; the feed's conversion
            raise InternalError(
                f"tensorflow failed to run model '{self._model_name}': {exc}") from None
        times.mark_infer_done()
        return split_outputs(requests, outputs, sizes, self._layout)

    def unload(self) -> None:
        self.__dict__.pop("_function", None)
        self.__dict__.pop("_loaded", None)


def _to_numpy(tensor: Any) -> np.ndarray:
    array = tensor.numpy()
    return array if isinstance(array, np.ndarray) else np.asarray(array)


def _int_parameter(config: ModelConfig, key: str) -> int | None:
    value = parameter(config, key)
    if not value:
        return None
    try:
        return int(value)
    except ValueError:
        raise ModelLoadError(f"unable to load model '{config.name}': parameter '{key}' must be "
                             f"an integer, got '{value}'") from None


def apply_thread_settings(tf: Any, config: ModelConfig) -> None:
    """Set TensorFlow's process-wide thread pools from ``TF_NUM_INTRA_THREADS`` /
    ``TF_NUM_INTER_THREADS`` if TensorFlow has not run yet; else warn when they differ.

    A call that sets either starts TensorFlow's runtime (under a lock), which fixes the pools:
    the first model that sets them wins even when several load at once. ``tf``: the
    ``tensorflow`` module.

    Raises:
        ModelLoadError: a value that is not an integer, or a negative intra-op count
            (Triton's text).
    """
    intra = _int_parameter(config, "TF_NUM_INTRA_THREADS")
    inter = _int_parameter(config, "TF_NUM_INTER_THREADS")
    if intra is not None and intra < 0:
        raise ModelLoadError(f"parameter 'TF_NUM_INTRA_THREADS' must be non-negative number "
                             f"for TensorFlow model '{config.name}'")
    threading_api = tf.config.threading
    with _threads_lock:
        for key, wanted, get, put in (
            ("TF_NUM_INTRA_THREADS", intra, threading_api.get_intra_op_parallelism_threads,
             threading_api.set_intra_op_parallelism_threads),
            ("TF_NUM_INTER_THREADS", inter, threading_api.get_inter_op_parallelism_threads,
             threading_api.set_inter_op_parallelism_threads),
        ):
            if wanted is None or get() == wanted:
                continue
            try:
                put(wanted)
            except RuntimeError:  # "cannot be modified after initialization"
                logger.warning(
                    "model '%s': %s=%d not applied: TensorFlow's thread pools are one per process "
                    "and were created already with %d (0 = TensorFlow's choice) by the first "
                    "TensorFlow model loaded", config.name, key, wanted, get())
        if intra is not None or inter is not None:
            # start TensorFlow's runtime now, inside the lock: the pools are fixed from here on,
            # so the first model wins even when models load on parallel threads
            tf.config.list_logical_devices()


def _check_io(config: ModelConfig, signature: Signature, layout: BatchLayout) -> None:
    """The config's tensors against the signature's (tensorflow_backend's
    ``ValidateTensorFlowModel``): names, input count, datatypes and shapes.

    Raises:
        ModelLoadError: see the module doc.
    """
    name = config.name
    key = signature.key
    inputs = {t.name: t for t in signature.inputs}
    outputs = {t.name: t for t in signature.outputs}
    for entry in config.input:
        if entry.name not in inputs:
            raise ModelLoadError(
                f"unable to load model '{name}', unexpected inference input '{entry.name}': "
                f"signature '{key}' has inputs {sorted(inputs)}")
    expected = len(config.input) + len(layout.targets)
    if expected != len(inputs):
        raise ModelLoadError(
            f"unable to load model '{name}', configuration expects {expected} inputs, model "
            f"provides {len(inputs)} (signature '{key}' has inputs {sorted(inputs)})")
    for target in layout.targets:
        if target not in inputs:
            raise ModelLoadError(
                f"unable to load model '{name}', unexpected batch input '{target}': signature "
                f"'{key}' has inputs {sorted(inputs)}")
    batching = config.max_batch_size > 0
    for entry in config.input:
        tensor = inputs[entry.name]
        if entry.name in layout.ragged and tensor.dims is not None:
            check_ragged_input(name, entry.name, entry.optional, tensor.dims)
        else:
            _compare_dims(name, entry, tensor, batching, exact=False)
        _compare_type(name, "input", entry, tensor)
    for entry in config.output:
        if entry.name not in outputs:
            raise ModelLoadError(
                f"unable to load model '{name}', unexpected inference output '{entry.name}': "
                f"signature '{key}' has outputs {sorted(outputs)}")
        tensor = outputs[entry.name]
        if entry.name not in layout.outputs:
            _compare_dims(name, entry, tensor, batching, exact=True)
        _compare_type(name, "output", entry, tensor)


def _compare_type(model: str, kind: str, entry: Any, tensor: TfTensor) -> None:
    expected = DataType.Name(entry.data_type)
    if tensor.data_type != entry.data_type:
        provided = (DataType.Name(tensor.data_type) if tensor.data_type
                    else f"{tensor.tf_type} (no Triton datatype)")
        raise ModelLoadError(
            f"unable to load model '{model}', configuration expects datatype {expected} for "
            f"{kind} '{entry.name}', model provides {provided}")


def _compare_dims(model: str, entry: Any, tensor: TfTensor, batching: bool, exact: bool) -> None:
    """Triton tensorflow_backend's ``CompareDims``; a signature shape of unknown rank
    takes the config's (as Triton does for a rank-0 signature shape)."""
    if tensor.dims is None:
        return
    dims = [int(d) for d in (entry.reshape.shape if entry.HasField("reshape") else entry.dims)]
    shape = "[" + ",".join(str(d) for d in tensor.dims) + "]"
    if batching and (not tensor.dims or tensor.dims[0] != -1):
        raise ModelLoadError(
            f"model '{model}', tensor '{entry.name}': for the model to support batching the shape "
            "should have at least 1 dimension and the first dimension must be -1; but shape "
            f"expected by the model is {shape}")
    full = [-1, *dims] if batching else dims
    same = len(full) == len(tensor.dims) and all(
        m == c for m, c in zip(tensor.dims, full, strict=True) if exact or m != -1)
    if not same:
        configured = "[" + ",".join(str(d) for d in full) + "]"
        extra = (" (an initial batch dimension because max_batch_size > 0 followed by the "
                 f"explicit tensor shape, making complete shape {configured})" if batching
                 else f" (shape {configured})")
        raise ModelLoadError(
            f"model '{model}', tensor '{entry.name}': the model expects {len(tensor.dims)} "
            f"dimensions (shape {shape}) but the model configuration specifies {len(full)} "
            f"dimensions{extra}")
