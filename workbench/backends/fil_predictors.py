"""The tree libraries' own CPU predictors behind the fil backend, one per ``model_type``.

Each predictor reads one model file with its library (imported here, on the first load of
that ``model_type``) and predicts with the library's own CPU code, so the served numbers are
the library's: xgboost ``Booster.inplace_predict`` (float32), lightgbm ``Booster.predict``
(float64), treelite ``gtil.predict`` (the model's leaf type, float64 for scikit-learn imports).
:meth:`TreePredictor.predict` returns that array in the library's own dtype, shaped
``[rows, width]``; :mod:`workbench.backends.fil` turns it into FIL's output and casts to FP32
last, so results equal ``library.predict(...)`` / ``predict_proba(...)`` cast to float32.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

import numpy as np

from workbench.common.errors import ModelLoadError
from workbench.common.frameworks import import_framework
from workbench.files.model_files import read_model_bytes

#: model_type -> (the import, the pip package) it needs
LIBRARIES = {
    "xgboost": ("xgboost", "xgboost"),
    "xgboost_json": ("xgboost", "xgboost"),
    "xgboost_ubj": ("xgboost", "xgboost"),
    "lightgbm": ("lightgbm", "lightgbm"),
    "treelite_checkpoint": ("treelite", "treelite"),
}


class TreePredictor(ABC):
    """One loaded tree model.

    Attributes:
        n_features: the number of input columns the model was trained on.
    """

    n_features: int

    @abstractmethod
    def predict(self, x: np.ndarray) -> np.ndarray:
        """``x``: FP32 ``[rows, n_features]`` -> the library's prediction ``[rows, width]`` in the
        library's dtype: probabilities for classifiers (one column for a binary one), the
        prediction for regressors (after the objective's transform, as the library's predict)."""

    def contributions(self, x: np.ndarray) -> np.ndarray:
        """SHAP values of ``x`` (FP32 ``[rows, n_features]``) by the library's own TreeSHAP:
        ``[rows, groups, n_features + 1]`` (the last column the bias; ``groups`` 1 for binary
        classifiers and regressors, else the number of classes), the library's dtype.

        Raises:
            NotImplementedError: the library has no SHAP (Treelite's GTIL).
        """
        raise NotImplementedError


class XGBoostPredictor(TreePredictor):
    """An xgboost ``Booster`` (JSON, UBJSON or the binary format; xgboost detects which)."""

    def __init__(self, xgb: Any, path: Path, nthread: int) -> None:
        self._booster = xgb.Booster()
        self._booster.load_model(bytearray(read_model_bytes(path)))
        if nthread > 0:
            self._booster.set_param({"nthread": nthread})
        self._xgb, self._nthread = xgb, nthread
        self.n_features = int(self._booster.num_features())

    def predict(self, x: np.ndarray) -> np.ndarray:
        out = self._booster.inplace_predict(x, validate_features=False)
        return out.reshape(len(x), -1)

    def contributions(self, x: np.ndarray) -> np.ndarray:
        matrix = self._xgb.DMatrix(x, nthread=self._nthread if self._nthread > 0 else None)
        out = self._booster.predict(matrix, pred_contribs=True, validate_features=False)
        return out.reshape(len(x), -1, self.n_features + 1)


class LightGBMPredictor(TreePredictor):
    """A lightgbm ``Booster`` from its text format (``model.txt``)."""

    def __init__(self, lgb: Any, path: Path, nthread: int) -> None:
        self._booster = lgb.Booster(model_file=str(path))
        self._kwargs = {"num_threads": nthread} if nthread > 0 else {}
        self.n_features = int(self._booster.num_feature())

    def predict(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(self._booster.predict(x, **self._kwargs)).reshape(len(x), -1)

    def contributions(self, x: np.ndarray) -> np.ndarray:
        out = np.asarray(self._booster.predict(x, pred_contrib=True, **self._kwargs))
        return out.reshape(len(x), -1, self.n_features + 1)


class TreelitePredictor(TreePredictor):
    """A Treelite checkpoint (``Model.serialize``; e.g. a scikit-learn forest imported with
    ``treelite.sklearn.import_model``), predicted by Treelite's GTIL."""

    def __init__(self, treelite: Any, path: Path, nthread: int) -> None:
        self._gtil = import_framework("treelite.gtil")
        self._model = treelite.Model.deserialize(str(path))
        self._nthread = nthread
        self.n_features = int(self._model.num_feature)

    def predict(self, x: np.ndarray) -> np.ndarray:
        out = self._gtil.predict(self._model, x, nthread=self._nthread)
        return np.asarray(out).reshape(len(x), -1)


_CLASSES: dict[str, type[XGBoostPredictor] | type[LightGBMPredictor] | type[TreelitePredictor]] = {
    "xgboost": XGBoostPredictor,
    "xgboost_json": XGBoostPredictor,
    "xgboost_ubj": XGBoostPredictor,
    "lightgbm": LightGBMPredictor,
    "treelite_checkpoint": TreelitePredictor,
}


def load_predictor(model: str, model_type: str, path: Path, nthread: int) -> TreePredictor:
    """Import the library of ``model_type`` and load ``path`` with it.

    Raises:
        ModelLoadError: the library is not installed (the text says what to install), the
            file is missing, or the library cannot read it (its own text).
    """
    module_name, package = LIBRARIES[model_type]
    try:
        module = import_framework(module_name)
    except ImportError:
        raise ModelLoadError(
            f"unable to load model '{model}': the fil backend needs the '{package}' package for "
            f"model_type '{model_type}'; install it with `pip install {package}` (or workbench[fil])"
        ) from None
    if not path.is_file():
        raise ModelLoadError(f"unable to load model '{model}', model file not found: '{path}'")
    try:
        return _CLASSES[model_type](module, path, nthread)
    except Exception as exc:  # noqa: BLE001 - each library raises its own error types
        # xgboost's text ends in its native stack ("Stack trace:\n  [bt] (0) libxgboost.so...")
        text = str(exc).split("Stack trace:")[0].strip()
        raise ModelLoadError(
            f"unable to load model '{model}': {module_name} cannot read '{path.name}' as "
            f"model_type '{model_type}': {type(exc).__name__}: {' '.join(text.split())[:500]}"
        ) from None
