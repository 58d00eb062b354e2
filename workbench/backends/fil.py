"""FIL backend (``backend: "fil"``): tree models (XGBoost, LightGBM, scikit-learn via Treelite) on CPU.

Follows Triton's fil_backend for the layout, the config and the outputs, and runs each
library's own CPU predictor (:mod:`workbench.backends.fil_predictors`) instead of GPU FIL:
outputs equal ``xgboost`` / ``lightgbm`` / ``treelite.gtil`` predictions cast to float32.
Files and parameters: :mod:`workbench.backends.fil_options`; each library is imported on the
first load of its type.

Tensors, as FIL: input ``input__0`` FP32 ``[n_features]`` (``[rows, n_features]`` with
``max_batch_size: 0``); output ``output__0`` FP32: ``[1]`` class index or regression value,
with ``predict_proba`` ``[n_classes]`` (binary: ``[1]`` or ``[2]``); optional
``treeshap_output`` FP32 ``[n_features + 1]`` (or ``[n_classes, n_features + 1]``), the
library's own TreeSHAP, only for requests that ask (a ``treelite_checkpoint`` model with it
fails the load). Outputs are squeezed as rapids-triton's ``squeeze_output``: ``dims: [ 1 ]``
answers ``[rows]``. The load checks names, FP32, feature count and output width against the
model; KIND_GPU fails the load; no auto-complete. A batch is joined, predicted once and split
back (:mod:`workbench.backends.batching`). Docs: docs/backends.md, the **FIL** item."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from tritonclient.grpc.model_config_pb2 import DataType, ModelConfig, ModelOutput

from workbench.backends.base import (
    Backend,
    BackendRequest,
    BackendResponse,
    ExecutionTimes,
    InstanceSpec,
    ModelInstance,
)
from workbench.backends.batching import gather_inputs, requested_union, split_outputs
from workbench.backends.fil_options import FilOptions, fil_options
from workbench.backends.fil_predictors import TreePredictor, load_predictor
from workbench.common.errors import InternalError, ModelLoadError

log = logging.getLogger("workbench.backends.fil")

INPUT_NAME = "input__0"
OUTPUT_NAME = "output__0"
SHAP_OUTPUT = "treeshap_output"


class FilBackend(Backend):
    """Creates :class:`FilInstance` objects; logs the config's GPU-layout hints once per load.

    ``framework_modules`` stays empty: the library depends on each model's ``model_type``, which
    the loader's pre-import cannot see, so the first model of a type counts its library's import
    in its ``memory_usage`` (xgboost's ~130 MB resident here; lightgbm and treelite a few MB).
    """

    def __init__(self) -> None:
        self._logged = False
        self._lock = threading.Lock()

    def load_instance(
        self, config: ModelConfig, version_dir: Path, spec: InstanceSpec
    ) -> ModelInstance:
        options = fil_options(config)
        with self._lock:
            first, self._logged = not self._logged, True
        if first:
            _log_options(config.name, options)
        return FilInstance(config, version_dir, spec, options)


def _log_options(model: str, options: FilOptions) -> None:
    threads = "the library's default (all cores)" if options.cpu_nthread <= 0 else options.cpu_nthread
    log.info("model '%s': model_type %s on the library's CPU predictor, threads %s", model,
             options.model_type, threads)
    if options.hints:
        log.info(
            "model '%s': FIL GPU-layout parameters %s accepted with no effect: the fil backend "
            "runs the libraries' CPU predictors, which pick their own layout",
            model, ", ".join(f"{k}={v}" for k, v in sorted(options.hints.items())),
        )


class FilInstance(ModelInstance):
    """One tree model loaded with its library, predicting on CPU.

    Raises (at construction):
        ModelLoadError: KIND_GPU; the library missing; the model file missing or unreadable;
            a config whose tensors disagree with FIL's names, FP32 or the model (features,
            output width, SHAP dims; SHAP for a treelite_checkpoint).
    """

    def __init__(self, config: ModelConfig, version_dir: Path, spec: InstanceSpec,
                 options: FilOptions) -> None:
        super().__init__(spec)
        name = config.name
        if spec.kind == "KIND_GPU":
            raise ModelLoadError(
                f"unable to load model '{name}': instance group '{spec.group_name}' is KIND_GPU "
                "but the fil backend runs the tree libraries' CPU predictors (GPU FIL needs "
                "cuML's FIL, not served here); use KIND_CPU or KIND_AUTO"
            )
        self._model_name = name
        self._options = options
        _check_names_and_types(config)
        path = version_dir / (config.default_model_filename or options.model_filename)
        self._predictor: TreePredictor = load_predictor(
            name, options.model_type, path, options.cpu_nthread)
        probe = self._predictor.predict(np.zeros((1, self._predictor.n_features), np.float32))
        self._width = int(probe.shape[1])
        self._out_width = _check_dims(config, options, self._predictor.n_features, self._width)
        self._outputs = [o.name for o in config.output]
        #: each output's dims per row (what a request of 0 rows gets 0 of)
        self._row_dims: dict[str, tuple[int, ...]] = {OUTPUT_NAME: (self._out_width,)}
        if SHAP_OUTPUT in self._outputs:
            self._row_dims[SHAP_OUTPUT] = _check_shap(config, options, self._predictor)
        # FIL squeezes its outputs: dims of 1 are dropped, so `dims: [ 1 ]` answers [rows]
        # (rapids-triton's squeeze_output, which fil_backend sets for legacy compatibility)
        self._row_dims = {n: tuple(d for d in dims if d != 1) for n, dims in self._row_dims.items()}

    def execute(
        self, requests: Sequence[BackendRequest], times: ExecutionTimes
    ) -> list[BackendResponse]:
        feed, sizes = gather_inputs(requests, (INPUT_NAME,), model=self._model_name)
        x = np.ascontiguousarray(feed[INPUT_NAME], dtype=np.float32)
        names = requested_union(requests, self._outputs)
        times.mark_input_done()
        if len(x) == 0:  # the libraries' 0-row results do not reshape: nothing to predict
            times.mark_infer_done()
            return split_outputs(requests, {n: np.zeros((0, *self._row_dims[n]), np.float32)
                                            for n in names}, sizes)
        outputs = {}
        try:
            if OUTPUT_NAME in names:
                raw = self._predictor.predict(x)
                outputs[OUTPUT_NAME] = fil_output(raw, self._options, self._out_width)
            if SHAP_OUTPUT in names:
                shap = self._predictor.contributions(x).astype(np.float32, copy=False)
                outputs[SHAP_OUTPUT] = shap[:, 0] if shap.shape[1] == 1 else shap
        except Exception as exc:  # noqa: BLE001 - each library raises its own error types
            raise InternalError(
                f"fil backend failed to run model '{self._model_name}': {type(exc).__name__}: {exc}"
            ) from None
        outputs = {n: a.reshape(len(x), *self._row_dims[n]) for n, a in outputs.items()}
        times.mark_infer_done()
        return split_outputs(requests, outputs, sizes)

    def unload(self) -> None:
        self.__dict__.pop("_predictor", None)


def fil_output(raw: np.ndarray, options: FilOptions, out_width: int) -> np.ndarray:
    """FIL's ``output__0`` from a library prediction ``raw`` ``[rows, width]``, FP32 ``[rows, out_width]``.

    Computed in ``raw``'s dtype and cast to float32 last, so it equals the library's
    ``predict_proba`` / ``predict`` cast to float32: a classifier without ``predict_proba``
    gives the class index (binary: ``p > threshold``; else the argmax), a binary one with it
    ``[p]`` or ``[1 - p, p]`` (``out_width`` 2), everything else ``raw`` itself.
    """
    if options.is_classifier and not options.predict_proba:
        if raw.shape[1] == 1:
            out = (raw > options.threshold).astype(np.float32)
        else:
            out = np.argmax(raw, axis=1).astype(np.float32).reshape(-1, 1)
    elif options.is_classifier and raw.shape[1] == 1 and out_width == 2:
        out = np.concatenate([1 - raw, raw], axis=1)
    else:
        out = raw
    return out.astype(np.float32, copy=False)


def _check_names_and_types(config: ModelConfig) -> None:
    """One FP32 input ``input__0``; FP32 outputs ``output__0`` and optionally ``treeshap_output``
    (FIL's fixed names), in any order.

    Raises:
        ModelLoadError: another name, count or datatype.
    """
    name = config.name
    inputs = [e.name for e in config.input]
    if inputs != [INPUT_NAME]:
        raise ModelLoadError(
            f"unable to load model '{name}': the fil backend takes exactly one input named "
            f"'{INPUT_NAME}', the model configuration has {inputs}"
        )
    outputs = [e.name for e in config.output]
    if OUTPUT_NAME not in outputs or len(outputs) != len(set(outputs)) or not set(outputs) <= {
            OUTPUT_NAME, SHAP_OUTPUT}:
        raise ModelLoadError(
            f"unable to load model '{name}': the fil backend takes an output named "
            f"'{OUTPUT_NAME}' and optionally one named '{SHAP_OUTPUT}', the model configuration "
            f"has {outputs}"
        )
    for kind, entries in (("input", config.input), ("output", config.output)):
        for entry in entries:
            data_type = DataType.Name(entry.data_type)
            if data_type != "TYPE_FP32":
                raise ModelLoadError(
                    f"unable to load model '{name}', configuration expects datatype {data_type} "
                    f"for {kind} '{entry.name}', the fil backend provides TYPE_FP32"
                )


def _output(config: ModelConfig, output: str) -> ModelOutput:
    """The config's output entry named ``output`` (checked to exist)."""
    return next(o for o in config.output if o.name == output)


def _check_shap(config: ModelConfig, options: FilOptions, predictor: TreePredictor) -> tuple[int, ...]:
    """``treeshap_output``'s dims are FIL's: ``[n_features + 1]``, or ``[n_classes,
    n_features + 1]`` for a multi-class classifier (batch dim first / ``[rows, ...]`` with
    ``max_batch_size: 0``), and the library computes SHAP values. Returns the dims per row.

    Raises:
        ModelLoadError: other dims, or a model_type without SHAP (treelite_checkpoint).
    """
    name = config.name
    try:
        groups = predictor.contributions(np.zeros((1, predictor.n_features), np.float32)).shape[1]
    except NotImplementedError:
        raise ModelLoadError(
            f"unable to load model '{name}': output '{SHAP_OUTPUT}' needs SHAP values, which "
            f"model_type '{options.model_type}' does not give here (Treelite's GTIL has no "
            "TreeSHAP); the xgboost and lightgbm model types have them"
        ) from None
    expected = [predictor.n_features + 1] if groups == 1 else [groups, predictor.n_features + 1]
    if config.max_batch_size == 0:
        expected = [-1, *expected]
    dims = [int(d) for d in _output(config, SHAP_OUTPUT).dims]
    fits = len(dims) == len(expected) and all(
        d == e or (i == 0 and config.max_batch_size == 0) for i, (d, e) in enumerate(zip(dims, expected, strict=True)))
    if not fits:
        raise ModelLoadError(
            f"unable to load model '{name}': output '{SHAP_OUTPUT}' has dims {dims} but the "
            f"model's SHAP values are {expected} (the features and the bias"
            f"{'' if groups == 1 else ', per class'})"
        )
    return (predictor.n_features + 1,) if groups == 1 else (groups, predictor.n_features + 1)


def _check_dims(config: ModelConfig, options: FilOptions, n_features: int, width: int) -> int:
    """The input's dims hold the model's feature count, the output's the width FIL writes.

    Returns the output's width (its last dim). Raises ModelLoadError on a mismatch.
    """
    name = config.name
    batching = config.max_batch_size > 0
    rank = 1 if batching else 2
    where = "" if batching else " (max_batch_size 0: [rows, columns])"
    in_dims, out_dims = list(config.input[0].dims), list(_output(config, OUTPUT_NAME).dims)
    if len(in_dims) != rank or in_dims[-1] != n_features:
        raise ModelLoadError(
            f"unable to load model '{name}': input '{INPUT_NAME}' has dims {in_dims} but the model "
            f"takes {n_features} features: dims must be {[n_features] if batching else [-1, n_features]}"
            f"{where}"
        )
    if not options.is_classifier or not options.predict_proba:
        allowed = [1] if options.is_classifier else [width]
        what = "the class index" if options.is_classifier else "the prediction"
    else:
        allowed = [1, 2] if width == 1 else [width]
        what = f"{'binary' if width == 1 else width}-class probabilities (predict_proba)"
    if len(out_dims) != rank or out_dims[-1] not in allowed:
        shown = " or ".join(str([w] if batching else [-1, w]) for w in allowed)
        raise ModelLoadError(
            f"unable to load model '{name}': output '{OUTPUT_NAME}' has dims {out_dims} but the "
            f"model returns {what}: dims must be {shown}{where}"
        )
    return int(out_dims[-1])
