#!/usr/bin/env python3
"""Classify scikit-learn's held-out breast cancer rows with the fil samples on a running server.

A pure client: it needs tritonclient, numpy and scikit-learn, not the workbench package.

    make serve                                                    # terminal 1: serve sample_models/repository
    .venv/bin/python examples/classify_cancer.py                  # terminal 2: the three tree models, HTTP
    .venv/bin/python examples/classify_cancer.py --protocol grpc --url localhost:8001
    .venv/bin/python examples/classify_cancer.py --model cancer_lightgbm

The test split is the one the models were evaluated on at build time
(``train_test_split(X, y, test_size=0.25, random_state=0)``, 143 rows). The 30 raw features
(FP32, shape [batch, 30]) go to input ``input__0`` in requests of at most 64 rows; output
``output__0`` [batch, 2] holds the probabilities of malignant (0) and benign (1), and its argmax
is the predicted class (Triton's FIL backend conventions, ``predict_proba: true``).
Exit status: 0 ok, 1 if an accuracy is below --min-accuracy, 2 if the server or a model is not
reachable (a message, no traceback).
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

MODELS = ("cancer_xgboost", "cancer_lightgbm", "cancer_sklearn")
BATCH = 64


def load_test_split() -> tuple[np.ndarray, np.ndarray]:
    """Held-out rows: features FP32 [143, 30], labels INT64 [143] (1 = benign)."""
    from sklearn.datasets import load_breast_cancer
    from sklearn.model_selection import train_test_split

    x, y = load_breast_cancer(return_X_y=True)
    _, x_test, _, y_test = train_test_split(x.astype(np.float32), y, test_size=0.25, random_state=0)
    return x_test, y_test.astype(np.int64)


def probabilities(client, module, model: str, x: np.ndarray) -> np.ndarray:
    """``output__0`` of ``model`` for rows ``x`` (FP32 [n, 30]) -> FP32 [n, 2], in requests of BATCH rows."""
    chunks = []
    for start in range(0, len(x), BATCH):
        rows = x[start : start + BATCH]
        tensor = module.InferInput("input__0", list(rows.shape), "FP32")
        tensor.set_data_from_numpy(rows)
        result = client.infer(model, [tensor], outputs=[module.InferRequestedOutput("output__0")])
        chunks.append(result.as_numpy("output__0"))
    return np.concatenate(chunks)


def main(argv: list[str] | None = None) -> int:
    """Print each model's held-out accuracy; returns the exit status (see the module doc)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=None, help="server address (default localhost:8000, gRPC localhost:8001)")
    parser.add_argument("--protocol", choices=("http", "grpc"), default="http")
    parser.add_argument("--model", action="append", choices=MODELS, help="one model (repeatable; default all three)")
    parser.add_argument("--min-accuracy", type=float, default=0.93)
    args = parser.parse_args(argv)
    if args.protocol == "http":
        import tritonclient.http as module
    else:
        import tritonclient.grpc as module
    from tritonclient.utils import InferenceServerException

    url = args.url or ("localhost:8000" if args.protocol == "http" else "localhost:8001")
    x, y = load_test_split()
    failed = False
    client = module.InferenceServerClient(url)
    try:
        for model in args.model or MODELS:
            try:
                proba = probabilities(client, module, model, x)
            except (InferenceServerException, OSError) as exc:
                print(f"error: {model} at {url} ({args.protocol}): {exc}", file=sys.stderr)
                return 2
            accuracy = float((proba.argmax(axis=1) == y).mean())
            ok = accuracy >= args.min_accuracy
            failed |= not ok
            print(f"{model}: accuracy {accuracy:.4f} on {len(y)} held-out rows "
                  f"({'ok' if ok else 'below'} --min-accuracy {args.min_accuracy})")
    finally:
        client.close()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
