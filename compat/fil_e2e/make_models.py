#!/usr/bin/env python3
"""Write the model repository that Triton FIL backend's own end-to-end QA (``qa/L0_e2e``) reads.

    .venv/bin/python compat/fil_e2e/make_models.py OUT_DIR

The upstream suite (``test_model.py`` of github:triton-inference-server/fil_backend) asks the
server for each model's config, loads the same model file with Treelite's GTIL as its ground
truth and compares the served ``output__0`` with it. Upstream builds the repository with cuML
(data sets) and a GPU; this writes the same models (names, file formats, features, classes,
tree counts and depths, config parameters as its ``generate_example_models.sh`` lists them) with
scikit-learn's data generators and the libraries' CPU trainers, and ``KIND_CPU`` instance groups
(upstream's CPU run). Not written: ``cuml`` (a cuML random forest: needs cuML and a GPU) and
``xgboost_shap`` (upstream marks its cases xfail before it reads the model).

Deterministic: every generator and trainer gets a fixed seed.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

#: model_type -> the file name FIL reads (the fil backend's own table)
from workbench.backends.fil_options import MODEL_FILES as FILE_NAMES


@dataclass(frozen=True)
class Recipe:
    """One model of upstream's list (``generate_example_models.sh``)."""

    name: str
    library: str  # xgboost | lightgbm | lightgbm_rf | sklearn
    file_format: str  # the FIL model_type: xgboost_json | xgboost_ubj | lightgbm | treelite_checkpoint
    depth: int
    trees: int
    features: int = 32
    classes: int = 2
    cat_features: int = 0
    task: str = "classification"
    predict_proba: bool = False


RECIPES = (
    Recipe("xgboost_json", "xgboost", "xgboost_json", 7, 500, features=500, predict_proba=True),
    Recipe("xgboost_ubj", "xgboost", "xgboost_ubj", 7, 500, features=500, predict_proba=True),
    Recipe("lightgbm", "lightgbm", "lightgbm", 3, 2000, cat_features=3, predict_proba=True),
    Recipe("lightgbm_rf", "lightgbm_rf", "lightgbm", 10, 20, classes=10, predict_proba=True),
    Recipe("regression", "lightgbm", "lightgbm", 25, 10, features=400, task="regression"),
    Recipe("sklearn", "sklearn", "treelite_checkpoint", 3, 10, features=500, predict_proba=True),
)
SAMPLES = 1000
MAX_BATCH_SIZE = 8192


def data(recipe: Recipe) -> tuple[np.ndarray, np.ndarray]:
    """Training rows ``[SAMPLES, features]`` float32 and labels (classes) or targets."""
    from sklearn.datasets import make_classification, make_regression

    informative = recipe.features // 3
    if recipe.task == "regression":
        x, y = make_regression(n_samples=SAMPLES, n_features=recipe.features,
                               n_informative=informative, random_state=0)
    else:
        x, y = make_classification(n_samples=SAMPLES, n_features=recipe.features,
                                   n_informative=informative, n_classes=recipe.classes,
                                   random_state=0)
    x = x.astype(np.float32)
    if recipe.cat_features:
        # categorical columns as upstream makes them: the sign of a column, two categories
        x[:, : recipe.cat_features] = (x[:, : recipe.cat_features] >= 0).astype(np.float32)
    return x, y


def train_and_save(recipe: Recipe, path: Path) -> None:
    """Train ``recipe``'s model on :func:`data` and save it at ``path`` in its file format."""
    x, y = data(recipe)
    if recipe.library == "xgboost":
        import xgboost as xgb

        model = xgb.XGBClassifier(objective="binary:logistic", tree_method="hist",
                                  max_depth=recipe.depth, n_estimators=recipe.trees,
                                  random_state=0, n_jobs=2)
        model.fit(x, y)
        model.save_model(path)
    elif recipe.library in ("lightgbm", "lightgbm_rf"):
        import lightgbm as lgb

        params: dict[str, object] = {"max_depth": recipe.depth, "verbose": -1, "seed": 0,
                                     "num_threads": 2, "deterministic": True}
        if recipe.task == "regression":
            params.update(objective="regression", metric="l2")
        elif recipe.classes > 2:
            params.update(objective="multiclass", metric="multi_logloss", num_class=recipe.classes)
        else:
            params.update(objective="binary", metric="binary_logloss")
        if recipe.library == "lightgbm_rf":
            params.update(boosting="rf", bagging_fraction=0.8, bagging_freq=1)
        categorical = list(range(recipe.cat_features)) or "auto"
        booster = lgb.train(params, lgb.Dataset(x, label=y, categorical_feature=categorical),
                            recipe.trees)
        booster.save_model(str(path))
    elif recipe.library == "sklearn":
        import treelite
        from sklearn.ensemble import RandomForestClassifier

        forest = RandomForestClassifier(max_depth=recipe.depth, n_estimators=recipe.trees,
                                        random_state=0).fit(x, y)
        treelite.sklearn.import_model(forest).serialize(str(path))
    else:
        raise ValueError(f"unknown library {recipe.library!r}")


def config_pbtxt(recipe: Recipe) -> str:
    """The model config upstream's generator writes, with a KIND_CPU instance group."""
    output_dim = recipe.classes if recipe.predict_proba else 1
    params = {"model_type": recipe.file_format,
              "predict_proba": str(recipe.predict_proba).lower(),
              "is_classifier": str(recipe.task == "classification").lower(),
              "threshold": "0.5", "layout": "depth_first",
              "xgboost_allow_unknown_field": "true"}
    parameters = ",\n".join(f'  {{ key: "{k}" value: {{ string_value: "{v}" }} }}'
                            for k, v in params.items())
    return (f'name: "{recipe.name}"\nbackend: "fil"\nmax_batch_size: {MAX_BATCH_SIZE}\n'
            f'input [ {{ name: "input__0" data_type: TYPE_FP32 dims: [ {recipe.features} ] }} ]\n'
            f'output [ {{ name: "output__0" data_type: TYPE_FP32 dims: [ {output_dim} ] }} ]\n'
            f"instance_group [ {{ kind: KIND_CPU }} ]\nparameters [\n{parameters}\n]\n"
            "dynamic_batching { }\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="the model repository to write")
    parser.add_argument("--model", action="append", help="only these models (repeatable)")
    args = parser.parse_args(argv)
    for recipe in RECIPES:
        if args.model and recipe.name not in args.model:
            continue
        version = args.out / recipe.name / "1"
        version.mkdir(parents=True, exist_ok=True)
        train_and_save(recipe, version / FILE_NAMES[recipe.file_format])
        (args.out / recipe.name / "config.pbtxt").write_text(config_pbtxt(recipe))
        print(f"{recipe.name}: {recipe.trees} trees, depth {recipe.depth}, "
              f"{recipe.features} features -> {version / FILE_NAMES[recipe.file_format]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
