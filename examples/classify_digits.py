#!/usr/bin/env python3
"""Classify scikit-learn's held-out digits with the ``digits_mlp`` sample model on a running server.

A pure client: it needs tritonclient, numpy and scikit-learn, not the workbench package.

    make serve                                                    # terminal 1: serve sample_models/repository
    .venv/bin/python examples/classify_digits.py                  # terminal 2: latest version
    .venv/bin/python examples/classify_digits.py --all-versions   # latest, then versions 1 and 2 explicitly
    .venv/bin/python examples/classify_digits.py --url localhost:8000 --model-version 1

The test split is the one the model was evaluated on at build time
(``train_test_split(X, y, test_size=0.25, random_state=0)``, 450 images). Raw pixels (FP32 0..16,
shape [batch, 64]) go to input ``pixels`` in requests of at most the model's ``max_batch_size``
rows, read from the served config (64 as built; whatever a Config edit made it since); the argmax
of output ``logits`` [batch, 10] is the predicted digit.
Exit status: 0 ok, 1 if an accuracy is below --min-accuracy, 2 if the server or model is not reachable
or a request is refused (e.g. --batch-size above the served max_batch_size): a message, no traceback.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

INPUT_NAME = "pixels"
OUTPUT_NAME = "logits"
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


def max_batch_size(client, url: str, model: str, version: str) -> int:
    """The served config's ``max_batch_size`` of ``model`` / ``version`` (0: the model does not
    batch, and each request carries one row); exit with status 2 if the config is unreadable."""
    from tritonclient.utils import InferenceServerException

    try:
        config = client.get_model_config(model, version)
    except (InferenceServerException, OSError) as exc:
        print(f"error: reading the config of {model!r} on {url} failed: {exc}", file=sys.stderr)
        sys.exit(2)
    return int(config.get("max_batch_size", 0))


def predict(client, model: str, version: str, pixels: np.ndarray, batch_size: int) -> tuple[np.ndarray, str]:
    """Send ``pixels`` FP32 [n, 64] in requests of <= ``batch_size`` rows.

    ``batch_size`` 0: the model does not batch; one row per request, shape [64].
    Returns (predicted digits INT64 [n], the model version the server reports having used).
    """
    import tritonclient.http as httpclient

    predictions, served = [], set()
    for start in range(0, len(pixels), max(batch_size, 1)):
        batch = np.ascontiguousarray(pixels[start : start + max(batch_size, 1)])
        if batch_size == 0:
            batch = batch[0]
        tensor = httpclient.InferInput(INPUT_NAME, list(batch.shape), "FP32")
        tensor.set_data_from_numpy(batch, binary_data=True)
        result = client.infer(
            model,
            [tensor],
            model_version=version,
            outputs=[httpclient.InferRequestedOutput(OUTPUT_NAME, binary_data=True)],
        )
        predictions.append(result.as_numpy(OUTPUT_NAME).reshape(-1, 10).argmax(axis=1))
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
    parser.add_argument("--batch-size", type=int, default=None,
                        help="rows per request (default: the model's max_batch_size, read from the server)")
    parser.add_argument("--min-accuracy", type=float, default=0.9, help="fail below this (default: %(default)s)")
    parser.add_argument("--timeout-s", type=float, default=30.0, help="connection and network timeout in seconds")
    args = parser.parse_args(argv)
    if args.batch_size is not None and args.batch_size < 1:
        parser.error("--batch-size must be at least 1")
    return args


def rows_per_request(requested: int | None, limit: int, model: str) -> int:
    """``requested`` rows (default: ``limit``, the model's max_batch_size); exit with status 2
    when it is above the model's maximum, which the server would refuse."""
    if requested is None:
        return limit
    if (limit == 0 and requested != 1) or (limit and requested > limit):
        print(f"error: --batch-size {requested} is above {model}'s max_batch_size {limit}"
              + (" (the model does not batch: one row per request)" if limit == 0 else ""),
              file=sys.stderr)
        sys.exit(2)
    return requested if limit else 0


def main(argv: list[str] | None = None) -> int:
    """Classify the test split for each requested version; returns the exit status."""
    from tritonclient.utils import InferenceServerException

    args = parse_args(argv)
    versions = list(ALL_VERSIONS) if args.all_versions else [args.model_version]
    pixels, labels = load_test_split()
    client = connect(args.url, args.timeout_s)
    failed = []
    try:
        for version in versions:
            require_ready(client, args.url, args.model, version)
            limit = max_batch_size(client, args.url, args.model, version)
            rows = rows_per_request(args.batch_size, limit, args.model)
            source = "the model's max_batch_size" if rows == limit else f"--batch-size; max_batch_size {limit}"
            print(f"{args.model} version {version_label(version)}: requests of at most "
                  f"{max(rows, 1)} rows ({source})")
            try:
                predicted, served = predict(client, args.model, version, pixels, rows)
            except InferenceServerException as exc:
                print(f"error: {args.model} version {version_label(version)} refused a request: "
                      f"{exc.message()}", file=sys.stderr)
                return 2
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
