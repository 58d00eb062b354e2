"""Triton's classification extension: an output asked for with ``classification: K`` comes
back as its top-K entries per batch item instead of the raw scores.

Follows Triton's ``classification.cc`` and ``http_server.cc``: each entry is the string
``"<value>:<index>"`` or ``"<value>:<index>:<label>"`` (the label from the output's
``label_filename``, one label per line, when that line exists and is not empty); values
are printed as C++ ``std::to_string`` does (floats with 6 decimals, integers plainly);
entries are ordered by value, highest first; K is clamped to the entries per item.
Label files are read at model load (:func:`read_labels`).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.common.errors import InternalError, InvalidArgument, Unsupported
from workbench.files.model_files import read_text

#: wire datatypes Triton can classify (BOOL, FP16, BF16 and BYTES cannot)
CLASSIFIABLE = frozenset({"UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32",
                          "INT64", "FP32", "FP64"})
_FLOATS = ("FP32", "FP64")
#: most entries per batch item Triton classifies (``classification.cc``
#: kMaxClassificationElements); more is INVALID_ARG "classification output tensor too large"
MAX_CLASSIFICATION_ELEMENTS = 1_000_000


def class_count(value: object) -> int:
    """The ``classification`` parameter of a requested output as K (0 = raw output).

    Raises:
        InvalidArgument: not a non-negative integer ("Unable to set 'classification': ...",
            Triton's text for a JSON value that is not an unsigned integer).
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgument("Unable to set 'classification': attempt to access JSON "
                              "non-unsigned-integer as unsigned-integer")
    return value


def classify(scores: np.ndarray, datatype: str, k: int, batched: bool,
             labels: list[str] | None = None) -> np.ndarray:
    """Top-``k`` classification strings of an output tensor.

    Args:
        scores: the output, batch dim first when ``batched``; any numeric dtype.
        datatype: its wire datatype (``"FP32"``...).
        k: classes asked for, > 0; clamped to the number of entries per batch item.
        batched: the model batches (``max_batch_size > 0``): one result row per batch item.
        labels: the output's labels by class index, or None.

    Returns:
        BYTES (object array of ``bytes``) of shape ``[batch, min(k, n)]`` when batched,
        else ``[min(k, n)]``, where n is the number of entries per item.

    Raises:
        InvalidArgument: a datatype Triton cannot classify ("class result not available
            for output due to unsupported type '<T>'"); more than
            :data:`MAX_CLASSIFICATION_ELEMENTS` entries per item ("classification output
            tensor too large", Triton's text).
    """
    if datatype not in CLASSIFIABLE:
        raise InvalidArgument(
            f"class result not available for output due to unsupported type '{datatype}'"
        )
    batch = scores.shape[0] if batched and scores.ndim else 1
    width = math.prod(scores.shape[1:]) if batched and scores.ndim else scores.size
    if width > MAX_CLASSIFICATION_ELEMENTS:
        raise InvalidArgument("classification output tensor too large")
    rows = scores.reshape(batch, width)  # explicit width: an empty batch cannot infer a -1
    # descending by value, lowest index first among equals: sort the mirrored rows stably
    order = (width - 1 - np.argsort(rows[:, ::-1], axis=1, kind="stable")[:, ::-1])[:, :k]
    text = "{:f}:{}" if datatype in _FLOATS else "{}:{}"
    result = np.empty(order.shape, dtype=object)
    for r, (row, indices) in enumerate(zip(rows, order, strict=True)):
        for c, index in enumerate(indices.tolist()):
            entry = text.format(row[index].item(), index)
            label = labels[index] if labels is not None and index < len(labels) else ""
            result[r, c] = (f"{entry}:{label}" if label else entry).encode()
    return result if batched and scores.ndim else result[0]


def read_labels(config: ModelConfig, model_dir: Path | None) -> dict[str, list[str]]:
    """Labels of every output with a ``label_filename`` (path relative to the model folder).

    Lines are split as ``std::getline`` does (on ``\\n``; a final newline adds no label); the
    first :data:`MAX_CLASSIFICATION_ELEMENTS` are kept (no class index reaches further). The
    file is read as the poll's scan reads it (:func:`workbench.files.model_files.read_file`: a
    regular file only, opened non-blocking, bounded in time), at most
    :data:`~workbench.files.model_files.MAX_TEXT_FILE_BYTES` bytes (Triton reads any size).

    Raises:
        Unsupported: the path leaves the model folder (Triton's text).
        InternalError: the file cannot be read ("failed to open text file for read <path>:
            <why>": missing, a FIFO, too large, no answer in time).
    """
    labels: dict[str, list[str]] = {}
    for output in config.output:
        if not output.label_filename or model_dir is None:
            continue
        path = (model_dir / output.label_filename).resolve()
        if not path.is_relative_to(model_dir.resolve()):
            raise Unsupported(f"label file path '{model_dir / output.label_filename}' for output "
                              f"'{output.name}' in model '{config.name}' is outside model directory")
        try:
            text = read_text(path)
        except OSError as exc:
            raise InternalError(f"failed to open text file for read {path}: {exc.strerror or exc}") from None
        lines = text.split("\n", MAX_CLASSIFICATION_ELEMENTS)[:MAX_CLASSIFICATION_ELEMENTS + 1]
        lines = lines[:-1] if lines and lines[-1] == "" else lines
        labels[output.name] = lines[:MAX_CLASSIFICATION_ELEMENTS]
    return labels
