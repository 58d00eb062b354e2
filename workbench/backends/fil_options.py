"""The FIL backend's model-config ``parameters`` (Triton fil_backend's names; values are strings).

Read once per load by :func:`fil_options`; :mod:`workbench.backends.fil` uses the result.

* ``model_type``: the format and its default file (``xgboost`` ``xgboost.model``, the default;
  ``xgboost_json`` ``.json``; ``xgboost_ubj`` ``.ubj``; ``lightgbm`` ``model.txt``;
  ``treelite_checkpoint`` ``checkpoint.tl``), unless ``default_model_filename``; any other
  value fails the load (FIL: "<type> not recognized as a valid serialization format.").
* ``is_classifier`` (required; FIL's older ``output_class`` accepted and winning),
  ``predict_proba`` (default false), ``threshold`` (default 0.5).
* ``cpu_nthread``: the library predictor's threads; -1 = all cores (FIL's default); unset:
  :func:`default_cpu_threads`, the usable CPUs less 2, at least 1 (all-core OpenMP on a busy
  2-CPU machine cost 3-7x).
* GPU-layout hints (``layout``, ``chunk_size``, ``transfer_threshold``, ``storage_type``,
  ``algo``, ``blocks_per_sm``, ``threads_per_tree``, ``use_experimental_optimizations``,
  ``xgboost_allow_unknown_field``): accepted and logged once per load, no effect.

Booleans are ``true``/``false`` (any case); a value that does not parse fails the load with
the parameter's name. Docs and measurements: docs/backends.md, the **FIL** item."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.common.errors import ModelLoadError

#: model_type -> the default model file name in a version folder (Triton FIL's ``model_file``)
MODEL_FILES = {
    "xgboost": "xgboost.model",
    "xgboost_json": "xgboost.json",
    "xgboost_ubj": "xgboost.ubj",
    "lightgbm": "model.txt",
    "treelite_checkpoint": "checkpoint.tl",
}

#: FIL parameters that steer GPU FIL's memory layout or kernels: accepted, logged, no effect
GPU_HINTS = (
    "layout", "chunk_size", "transfer_threshold",
    "storage_type", "algo", "blocks_per_sm", "threads_per_tree", "use_experimental_optimizations",
    "xgboost_allow_unknown_field",
)


@dataclass(frozen=True)
class FilOptions:
    """What the config's parameters ask of one FIL model.

    Attributes:
        model_type: one of :data:`MODEL_FILES`.
        is_classifier: the model is a classifier (class index or probabilities out).
        predict_proba: return probabilities per class (classifiers only).
        threshold: a binary classifier's decision threshold (positive when ``p > threshold``).
        cpu_nthread: predictor threads, -1 = the library's default (all cores); the config's
            ``cpu_nthread``, else :func:`default_cpu_threads`.
        hints: the GPU-layout hints the config set (name -> value), which do nothing here.
    """

    model_type: str
    is_classifier: bool
    predict_proba: bool = False
    threshold: float = 0.5
    cpu_nthread: int = 1
    hints: dict[str, str] = field(default_factory=dict)

    @property
    def model_filename(self) -> str:
        """The default file name of ``model_type`` (``xgboost.json`` ...)."""
        return MODEL_FILES[self.model_type]


def fil_options(config: ModelConfig) -> FilOptions:
    """Parse the FIL parameters of ``config`` (see the module doc).

    Raises:
        ModelLoadError: an unknown ``model_type``, no ``is_classifier`` / ``output_class``, or
            a value that does not parse (the text names the parameter).
    """
    name = config.name
    params = {k: v.string_value for k, v in config.parameters.items()}
    model_type = params.get("model_type", "xgboost")
    if model_type not in MODEL_FILES:
        raise ModelLoadError(
            f"unable to load model '{name}': {model_type} not recognized as a valid serialization "
            f"format; the fil backend's model_type is one of {', '.join(MODEL_FILES)}"
        )
    if "output_class" in params:  # FIL's older name wins, as in FIL 25.09+
        is_classifier = _bool(name, "output_class", params["output_class"])
    elif "is_classifier" in params:
        is_classifier = _bool(name, "is_classifier", params["is_classifier"])
    else:
        raise ModelLoadError(
            f"unable to load model '{name}': the fil backend needs the parameter 'is_classifier' "
            "(or the older 'output_class'): \"true\" for a classifier, \"false\" for a regressor"
        )
    return FilOptions(
        model_type=model_type,
        is_classifier=is_classifier,
        predict_proba=_bool(name, "predict_proba", params.get("predict_proba", "false")),
        threshold=_number(name, "threshold", params.get("threshold", "0.5"), float),
        cpu_nthread=(int(_number(name, "cpu_nthread", params["cpu_nthread"], int))
                     if "cpu_nthread" in params else default_cpu_threads()),
        hints={k: params[k] for k in GPU_HINTS if k in params},
    )


def default_cpu_threads() -> int:
    """Predictor threads when the config sets no ``cpu_nthread``: the CPUs this process may run
    on (its affinity mask) less 2, at least 1 (see the module doc for why and the numbers)."""
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        usable = os.cpu_count() or 1
    return max(1, usable - 2)


def _bool(model: str, key: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered not in ("true", "false"):
        raise ModelLoadError(
            f"unable to load model '{model}': parameter '{key}' must be \"true\" or \"false\", "
            f"got \"{value}\""
        )
    return lowered == "true"


def _number(model: str, key: str, value: str, kind: type[float] | type[int]) -> float:
    try:
        return kind(value.strip())
    except ValueError:
        raise ModelLoadError(
            f"unable to load model '{model}': parameter '{key}' must be a"
            f"{'n integer' if kind is int else ' number'}, got \"{value}\""
        ) from None
