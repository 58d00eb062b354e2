#!/usr/bin/env python3
"""Classify scikit-learn's held-out digits with the ``digits_mlp`` sample model on a running server.

A pure client: it needs tritonclient, numpy and scikit-learn, not the workbench package.

    make serve                                                    # terminal 1: serve sample_models/repository
    .venv/bin/python examples/classify_digits.py                  # terminal 2: latest version
    .venv/bin/python examples/classify_digits.py --all-versions   # latest, then versions 1 and 2 explicitly
    .venv/bin/python examples/classify_digits.py --url localhost:8000 --model-version 1

The test split is the one the model was evaluated on at build time
(``train_test_split(X, y, test_size=0.25, random_state=0)``, 450 images). Raw pixels (FP32 0..16,
shape [batch, 64]) go to input ``pixels`` in requests of at most 64 rows (the model's
max_batch_size); the argmax of output ``logits`` [batch, 10] is the predicted digit.
Exit status: 0 ok, 1 if an accuracy is below --min-accuracy, 2 if the server or model is not reachable.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

INPUT_NAME = "pixels"
OUTPUT_NAME = "logits"
MAX_BATCH_SIZE = 64
ALL_VERSIONS = ("", "1", "2")  # "" = whatever the server considers latest


def load_test_split() -> tuple[np.ndarray, np.ndarray]:
    """Held-out digits: pixels FP32 [450, 64] with raw values 0..16, labels INT64 [450]."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    _, x_test, _, y_test = train_test_split(x, y, test_size=0.25, random_state=0)
    return x_test.astype(np.float32), y_test.astype(np.int64)


def version_label(version: str) -> str:
    """Human-readable name of a requested version ("" -> "latest")."""
    return version or "latest"


def connect(url: str, timeout_s: float):  # -> tritonclient.http.InferenceServerClient
    """Return an HTTP client for a live server at ``url``; exit with status 2 and a hint otherwise."""
    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException

    client = httpclient.InferenceServerClient(url, connection_timeout=timeout_s, network_timeout=timeout_s)
    try:
        live = client.is_server_live()
    except (InferenceServerException, OSError) as exc:
        live, reason = False, str(exc)
    else:
        reason = "server is not live"
    if not live:
        print(
            f"error: cannot reach an inference server at {url} ({reason}); start one with `make serve`",
            file=sys.stderr,
        )
        sys.exit(2)
    return client


def require_ready(client, url: str, model: str, version: str) -> None:
    """Exit with status 2 unless ``model`` / ``version`` is ready on the server."""
    from tritonclient.utils import InferenceServerException

    try:
        ready = client.is_model_ready(model, version)
    except (InferenceServerException, OSError) as exc:
        print(f"error: readiness check of {model!r} on {url} failed: {exc}", file=sys.stderr)
        sys.exit(2)
    if not ready:
        print(
            f"error: model {model!r} version {version_label(version)} is not ready on {url} "
            "(build it with `python sample_models/build.py` and serve sample_models/repository)",
            file=sys.stderr,
        )
        sys.exit(2)


def predict(client, model: str, version: str, pixels: np.ndarray, batch_size: int) -> tuple[np.ndarray, str]:
    """Send ``pixels`` FP32 [n, 64] in requests of <= ``batch_size`` rows.

    Returns (predicted digits INT64 [n], the model version the server reports having used).
    """
    import tritonclient.http as httpclient

    predictions, served = [], set()
    for start in range(0, len(pixels), batch_size):
        batch = np.ascontiguousarray(pixels[start : start + batch_size])
        tensor = httpclient.InferInput(INPUT_NAME, list(batch.shape), "FP32")
        tensor.set_data_from_numpy(batch, binary_data=True)
        result = client.infer(
            model,
            [tensor],
            model_version=version,
            outputs=[httpclient.InferRequestedOutput(OUTPUT_NAME, binary_data=True)],
        )
        predictions.append(result.as_numpy(OUTPUT_NAME).argmax(axis=1))
        served.add(str(result.get_response().get("model_version", "?")))
    return np.concatenate(predictions).astype(np.int64), ",".join(sorted(served))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options; see the module docstring."""
    parser = argparse.ArgumentParser(description="Classify held-out digits with digits_mlp on a running server.")
    parser.add_argument("--url", default="localhost:8000", help="server HTTP address (default: %(default)s)")
    parser.add_argument("--model", default="digits_mlp", help="model name (default: %(default)s)")
    parser.add_argument("--model-version", default="", help='version to query (default: "" = latest)')
    parser.add_argument(
        "--all-versions",
        action="store_true",
        help='query "" (latest), "1" and "2" in turn (overrides --model-version)',
    )
    parser.add_argument("--batch-size", type=int, default=MAX_BATCH_SIZE, help="rows per request (1..64)")
    parser.add_argument("--min-accuracy", type=float, default=0.9, help="fail below this (default: %(default)s)")
    parser.add_argument("--timeout-s", type=float, default=30.0, help="connection and network timeout in seconds")
    args = parser.parse_args(argv)
    if not 1 <= args.batch_size <= MAX_BATCH_SIZE:
        parser.error(f"--batch-size must be in 1..{MAX_BATCH_SIZE} (the model's max_batch_size)")
    return args


def main(argv: list[str] | None = None) -> int:
    """Classify the test split for each requested version; returns the exit status."""
    args = parse_args(argv)
    versions = list(ALL_VERSIONS) if args.all_versions else [args.model_version]
    pixels, labels = load_test_split()
    client = connect(args.url, args.timeout_s)
    failed = []
    try:
        for version in versions:
            require_ready(client, args.url, args.model, version)
            predicted, served = predict(client, args.model, version, pixels, args.batch_size)
            correct = int((predicted == labels).sum())
            accuracy = correct / len(labels)
            verdict = "ok" if accuracy >= args.min_accuracy else f"BELOW {args.min_accuracy}"
            print(
                f"{args.model} version {version_label(version):>6} (served by {served}): "
                f"accuracy {accuracy:.4f} ({correct}/{len(labels)}) {verdict}"
            )
            if accuracy < args.min_accuracy:
                failed.append(version_label(version))
    finally:
        client.close()
    if failed:
        print(f"error: accuracy below {args.min_accuracy} for version(s) {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
