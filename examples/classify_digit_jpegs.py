#!/usr/bin/env python3
"""Send digits as JPEG files to the ``digits_jpeg`` ensemble (DALI decoding -> digits_mlp).

A pure client: it needs tritonclient, numpy and Pillow (scikit-learn for the held-out digits),
not the workbench package.

    make serve                                                       # terminal 1
    .venv/bin/python examples/classify_digit_jpegs.py                # held-out digits as 32x32 JPEGs
    .venv/bin/python examples/classify_digit_jpegs.py my_digit.jpg   # your own JPEG file(s)

A request carries one JPEG's bytes as input ``IMAGE``, datatype UINT8, shape [1, n_bytes]; the
server decodes, resizes and scales it (``digits_jpeg_preprocess``, a DALI pipeline) and classifies
it (``digits_mlp``); the argmax of ``logits`` [1, 10] is the digit. Requests go out 8 at a time
(``async_infer``), so the server's dynamic batcher gives DALI JPEGs of different lengths in one
run. A digit should be light on a dark background, as scikit-learn's are. Exit status: 0 ok, 1 if
the held-out accuracy is below --min-accuracy, 2 if the server or model is not reachable or a
request is refused (e.g. a file that is not a JPEG): a message, no traceback.
"""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path

import numpy as np

MODEL = "digits_jpeg"


def digit_jpeg(pixels: np.ndarray) -> bytes:
    """A held-out digit (64 values 0..16) as a 32x32 grayscale JPEG, each pixel a 4x4 block."""
    from PIL import Image

    gray = np.clip(np.round(pixels.reshape(8, 8) * 255 / 16), 0, 255).astype(np.uint8)
    image = Image.fromarray(gray, mode="L").resize((32, 32), Image.Resampling.NEAREST)
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


def held_out_jpegs() -> tuple[list[bytes], np.ndarray]:
    """scikit-learn's 450 held-out digits (the build's split) as JPEGs, and their labels."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    _, x_test, _, y_test = train_test_split(x, y, test_size=0.25, random_state=0)
    return [digit_jpeg(row) for row in x_test], y_test


def classify(url: str, jpegs: list[bytes]) -> np.ndarray:
    """The predicted digit of each JPEG (8 requests in flight)."""
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(url, concurrency=8)
    try:
        pending = []
        for data in jpegs:
            tensor = httpclient.InferInput("IMAGE", [1, len(data)], "UINT8")
            tensor.set_data_from_numpy(np.frombuffer(data, np.uint8).reshape(1, -1))
            pending.append(client.async_infer(MODEL, [tensor]))
        return np.array([int(p.get_result().as_numpy("logits").argmax()) for p in pending])
    finally:
        client.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path, help="JPEG files (default: held-out digits)")
    parser.add_argument("--url", default="localhost:8000")
    parser.add_argument("--min-accuracy", type=float, default=0.9)
    args = parser.parse_args(argv)
    from tritonclient.utils import InferenceServerException

    try:
        if args.files:
            predictions = classify(args.url, [path.read_bytes() for path in args.files])
            for path, digit in zip(args.files, predictions, strict=True):
                print(f"{path}: {digit}")
            return 0
        jpegs, labels = held_out_jpegs()
        predictions = classify(args.url, jpegs)
    except (InferenceServerException, ConnectionError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    accuracy = float((predictions == labels).mean())
    sizes = sorted(len(j) for j in jpegs)
    print(f"{len(jpegs)} JPEGs ({sizes[0]}-{sizes[-1]} bytes) through {MODEL}: accuracy {accuracy:.4f} "
          + ("ok" if accuracy >= args.min_accuracy else f"below {args.min_accuracy}"))
    return 0 if accuracy >= args.min_accuracy else 1


if __name__ == "__main__":
    sys.exit(main())
