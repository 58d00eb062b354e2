"""Build the FIL samples: gradient-boosted classifiers of scikit-learn's breast cancer data set.

Three models, one per library, for the fil backend (``backend: "fil"``), each trained here on the
same split (``load_breast_cancer``, ``train_test_split(test_size=0.25, random_state=0)``), with
fixed seeds and one thread (so a rebuild gives the same model):

* ``cancer_xgboost``: ``xgboost.XGBClassifier`` saved as ``1/xgboost.json`` (``model_type: xgboost_json``).
* ``cancer_lightgbm``: ``lightgbm.LGBMClassifier`` saved as ``1/model.txt`` (``model_type: lightgbm``).
* ``cancer_sklearn``: ``sklearn.ensemble.GradientBoostingClassifier`` imported with
  ``treelite.sklearn.import_model`` and saved as ``1/checkpoint.tl`` (``model_type: treelite_checkpoint``).

Each serves ``input__0`` FP32 [30] (the 30 raw features) -> ``output__0`` FP32 [2]
(``predict_proba``: benign-vs-malignant probabilities, [P(0), P(1)]). Verified here: held-out accuracy
at least ``MIN_ACCURACY``, and the fil backend's math on the saved file (its own predictor and output
code) equals the library's ``predict_proba`` cast to float32 bit for bit (scikit-learn: Treelite's GTIL
on the imported model, and within ``SKLEARN_TOL`` of scikit-learn's own). Used by ``build.py``; see
``sample_models/README.md``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

SPLIT_SEED = 0
TEST_SIZE = 0.25
TRAIN_SEED = 0
N_ESTIMATORS = 100
MAX_DEPTH = 3
LEARNING_RATE = 0.1
MIN_ACCURACY = 0.93
SKLEARN_TOL = 1e-6  # Treelite GTIL vs scikit-learn's predict_proba (its own float64 sigmoid)
N_FEATURES = 30
MAX_BATCH_SIZE = 64


def load_split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(x_train, x_test, y_train, y_test): FP32 features [n, 30], int64 labels [n] (1 = benign)."""
    from sklearn.datasets import load_breast_cancer
    from sklearn.model_selection import train_test_split

    x, y = load_breast_cancer(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(
        x.astype(np.float32), y, test_size=TEST_SIZE, random_state=SPLIT_SEED)
    return x_train, x_test, y_train, y_test


def config_pbtxt(name: str, model_type: str) -> str:
    """The model's config.pbtxt: Triton fil_backend's layout and parameters."""
    return f"""\
name: "{name}"
backend: "fil"
max_batch_size: {MAX_BATCH_SIZE}
input [
  {{
    name: "input__0"
    data_type: TYPE_FP32
    dims: [ {N_FEATURES} ]
  }}
]
output [
  {{
    name: "output__0"
    data_type: TYPE_FP32
    dims: [ 2 ]
  }}
]
instance_group [
  {{
    count: 1
    kind: KIND_CPU
  }}
]
dynamic_batching {{ }}
parameters {{ key: "model_type" value: {{ string_value: "{model_type}" }} }}
parameters {{ key: "is_classifier" value: {{ string_value: "true" }} }}
parameters {{ key: "predict_proba" value: {{ string_value: "true" }} }}
# 100 trees of depth 3: one predictor thread
parameters {{ key: "cpu_nthread" value: {{ string_value: "1" }} }}
"""


def _train_xgboost(x: np.ndarray, y: np.ndarray, x_test: np.ndarray, path: Path) -> tuple[np.ndarray, str]:
    import xgboost as xgb

    model = xgb.XGBClassifier(n_estimators=N_ESTIMATORS, max_depth=MAX_DEPTH,
                              learning_rate=LEARNING_RATE, random_state=TRAIN_SEED, n_jobs=1,
                              tree_method="hist")
    model.fit(x, y)
    model.get_booster().save_model(str(path))
    return model.predict_proba(x_test), f"xgboost {xgb.__version__}"


def _train_lightgbm(x: np.ndarray, y: np.ndarray, x_test: np.ndarray, path: Path) -> tuple[np.ndarray, str]:
    import lightgbm as lgb

    model = lgb.LGBMClassifier(n_estimators=N_ESTIMATORS, max_depth=MAX_DEPTH, num_leaves=8,
                               learning_rate=LEARNING_RATE, random_state=TRAIN_SEED, n_jobs=1,
                               deterministic=True, force_row_wise=True, verbose=-1)
    model.fit(x, y)
    model.booster_.save_model(str(path))
    return np.asarray(model.predict_proba(x_test)), f"lightgbm {lgb.__version__}"


def _train_sklearn(x: np.ndarray, y: np.ndarray, x_test: np.ndarray, path: Path) -> tuple[np.ndarray, str]:
    import sklearn
    import treelite
    import treelite.gtil
    from sklearn.ensemble import GradientBoostingClassifier

    model = GradientBoostingClassifier(n_estimators=N_ESTIMATORS, max_depth=MAX_DEPTH,
                                       learning_rate=LEARNING_RATE, random_state=TRAIN_SEED)
    model.fit(x, y)
    imported = treelite.sklearn.import_model(model)
    imported.serialize(str(path))
    p = np.asarray(treelite.gtil.predict(imported, x_test)).reshape(-1, 1)
    diff = float(np.abs(p[:, 0] - model.predict_proba(x_test)[:, 1]).max())
    if diff > SKLEARN_TOL:
        raise RuntimeError(f"{path}: Treelite's P(1) differs from scikit-learn's by {diff:.1e}")
    reference = np.concatenate([1 - p, p], axis=1)
    return reference, (f"scikit-learn {sklearn.__version__} via treelite {treelite.__version__}, "
                       f"max |GTIL - sklearn| {diff:.1e}")


@dataclass(frozen=True)
class CancerTreeModel:
    """One sample; quacks like a ``build_<model>`` module for build.py (MODEL_NAME, build, __file__)."""

    MODEL_NAME: str
    model_type: str
    filename: str
    #: (x_train, y_train, x_test, path) -> (the library's predict_proba of x_test, tool versions)
    train: Callable[[np.ndarray, np.ndarray, np.ndarray, Path], tuple[np.ndarray, str]]
    __file__: ClassVar[str] = __file__

    def build(self, model_dir: Path) -> tuple[str, dict[str, Any]]:
        """Train, save ``config.pbtxt`` and ``1/<file>`` into the empty ``model_dir``, verify.

        Returns (one-line summary, build-info dict). Raises ``RuntimeError`` if the accuracy is
        below MIN_ACCURACY or the served output differs from the library's predict_proba.
        """
        from workbench.backends.fil import fil_output
        from workbench.backends.fil_options import FilOptions
        from workbench.backends.fil_predictors import load_predictor

        x_train, x_test, y_train, y_test = load_split()
        (model_dir / "config.pbtxt").write_text(config_pbtxt(self.MODEL_NAME, self.model_type))
        (model_dir / "1").mkdir()
        path = model_dir / "1" / self.filename
        proba, tools = self.train(x_train, y_train, x_test, path)
        reference = np.asarray(proba).astype(np.float32)
        options = FilOptions(self.model_type, is_classifier=True, predict_proba=True, cpu_nthread=1)
        predictor = load_predictor(self.MODEL_NAME, self.model_type, path, 1)
        served = fil_output(predictor.predict(x_test), options, 2)
        if served.dtype != np.float32 or not np.array_equal(served, reference):
            diff = float(np.abs(served.astype(np.float64) - reference).max())
            raise RuntimeError(f"{path}: the served probabilities differ from the library's by {diff:.1e}")
        single = fil_output(predictor.predict(x_test[:1]), options, 2)
        if not np.array_equal(single, reference[:1]):
            raise RuntimeError(f"{path}: a batch of 1 differs from the same row in a batch")
        accuracy = float((served.argmax(axis=1) == y_test).mean())
        if accuracy < MIN_ACCURACY:
            raise RuntimeError(f"{path}: held-out accuracy {accuracy:.4f} < {MIN_ACCURACY}")
        summary = (f"{tools}: accuracy on {len(y_test)} held-out rows {accuracy:.4f} (>= {MIN_ACCURACY}); "
                   "served predict_proba equals the library's (float32, bit-equal)")
        info = {"accuracy": accuracy, "n_test": len(y_test), "model_type": self.model_type,
                "split": {"test_size": TEST_SIZE, "random_state": SPLIT_SEED},
                "train": {"n_estimators": N_ESTIMATORS, "max_depth": MAX_DEPTH,
                          "learning_rate": LEARNING_RATE, "random_state": TRAIN_SEED}}
        return summary, info


MODELS = (
    CancerTreeModel("cancer_xgboost", "xgboost_json", "xgboost.json", _train_xgboost),
    CancerTreeModel("cancer_lightgbm", "lightgbm", "model.txt", _train_lightgbm),
    CancerTreeModel("cancer_sklearn", "treelite_checkpoint", "checkpoint.tl", _train_sklearn),
)
#: name -> builder (read by build.py)
BUILDERS = {model.MODEL_NAME: model for model in MODELS}
