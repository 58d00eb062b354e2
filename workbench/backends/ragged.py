"""Ragged batching on the backend side: flat ragged inputs, batch inputs, scattered outputs.

Follows Triton's backend library (``BackendInputCollector::BatchInputShape`` /
``ProcessBatchInput`` and ``BackendOutputResponder::ProcessBatchOutput``) and the
onnxruntime backend's handling of ragged inputs. :func:`workbench.backends.batching.gather_inputs`
and :func:`~workbench.backends.batching.split_outputs` call these; backends do not.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from workbench.backends.base import BackendRequest
from workbench.common.errors import InvalidArgument, ModelLoadError, request_prefix
from workbench.config.batch_io import BatchInputSpec, BatchOutputSpec

_DTYPES = {"TYPE_INT32": np.int32, "TYPE_FP32": np.float32}


def check_ragged_input(model: str, name: str, optional: bool, model_dims: Sequence[int]) -> None:
    """A ragged input (``allow_ragged_batch``) reaches the model flat: it must not be optional,
    and the model must take it as ``[-1]`` (``model_dims``: its shape in the model, -1 for a
    variable dim). Triton's onnxruntime backend's rule and texts (its double space too); the
    openvino backend applies the same.

    Raises:
        ModelLoadError: an optional ragged input, or a model shape other than ``[-1]``.
    """
    if optional:
        raise ModelLoadError(
            f"unable to load model '{model}', configuration expects model provides input "
            f"with shape [-1] for ragged input '{name}', which is not supported for "
            "optional input"
        )
    if list(model_dims) != [-1]:
        raise ModelLoadError(
            f"unable to load model '{model}', configuration expects model provides input "
            f"with shape [-1]  for ragged input '{name}', model provides "
            f"[{','.join(str(d) for d in model_dims)}]"
        )


def flat_ragged(arrays: Sequence[np.ndarray]) -> np.ndarray:
    """A ragged input of the whole batch: every request's elements, in request order, as one
    1-D array (shape ``[total elements]``, the requests' dtype), as Triton's backends give a
    ragged input to the model, also for a batch of one request."""
    if len(arrays) == 1:
        return arrays[0].reshape(-1)
    return np.concatenate([a.reshape(-1) for a in arrays])


def batch_input_array(spec: BatchInputSpec, requests: Sequence[BackendRequest]) -> np.ndarray:
    """The tensor of one batch input for this batch (dtype INT32 or FP32 as configured).

    With ``n`` requests and ``e_i`` the element count of request i's source input (its whole
    shape, batch dim included), as Triton computes them:

    - ``BATCH_ELEMENT_COUNT``: ``[e_0, ..., e_n-1]``, shape ``[n]``;
    - ``BATCH_ACCUMULATED_ELEMENT_COUNT``: the running sums ``[e_0, e_0+e_1, ...]``, shape ``[n]``;
    - ``BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO``: ``[0, e_0, e_0+e_1, ...]``, shape ``[n+1]``;
    - ``BATCH_MAX_ELEMENT_COUNT_AS_SHAPE``: shape ``[max e_i]``, only the shape carries
      information (zeros here; Triton leaves the buffer unset);
    - ``BATCH_ITEM_SHAPE``: one row per batch item (a request of batch b gives b rows) holding
      the source's shape without the batch dim, shape ``[sum of batch sizes, rank - 1]``;
    - ``BATCH_ITEM_SHAPE_FLATTEN``: the same values flat, shape ``[sum of batch sizes * (rank - 1)]``.

    Raises:
        InvalidArgument: a request without the source input (an optional one it left out).
    """
    dtype = _DTYPES[spec.data_type]
    shapes = [_source(request, spec.source, spec.targets[0]).shape for request in requests]
    counts = [int(np.prod(shape)) for shape in shapes]
    if spec.kind == "BATCH_ELEMENT_COUNT":
        return np.asarray(counts, dtype)
    if spec.kind == "BATCH_ACCUMULATED_ELEMENT_COUNT":
        return np.cumsum(counts).astype(dtype)
    if spec.kind == "BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO":
        return np.concatenate([[0], np.cumsum(counts)]).astype(dtype)
    if spec.kind == "BATCH_MAX_ELEMENT_COUNT_AS_SHAPE":
        return np.zeros(max(counts), dtype)
    rows = [list(shape[1:]) for shape in shapes for _ in range(shape[0] if shape else 1)]
    width = len(shapes[0]) - 1 if shapes[0] else 0
    items = np.asarray(rows, dtype).reshape(len(rows), width)
    return items if spec.kind == "BATCH_ITEM_SHAPE" else items.reshape(-1)


def scatter(spec: BatchOutputSpec, array: np.ndarray,
            requests: Sequence[BackendRequest]) -> list[np.ndarray] | str:
    """``BATCH_SCATTER_WITH_INPUT_SHAPE``: each request's part of the output ``array``.

    Request i's shape is ``spec.dims`` with every -1 replaced by the dim at the same index of
    its source input (Triton's "naive assumption that the dynamic dimension in output is mapped
    to the same dimension in the input"); the parts are consecutive runs of ``array``'s elements
    in request order, whatever ``array``'s own shape.

    Returns:
        The parts, or the error text when ``array`` holds fewer elements than the parts need,
        or a -1 has no source dim at its index.
    """
    flat = array.reshape(-1)
    parts, start = [], 0
    for request in requests:
        if spec.source not in request.inputs:
            return (f"batch output '{spec.target}' needs its source input '{spec.source}', "
                    "which the request does not carry")
        source = request.inputs[spec.source].shape
        if any(d == -1 and i >= len(source) for i, d in enumerate(spec.dims)):
            return (f"output '{spec.target}' has more dims than its batch output source input "
                    f"'{spec.source}' to take its shape from")
        shape = tuple(source[i] if d == -1 else d for i, d in enumerate(spec.dims))
        size = int(np.prod(shape))
        if start + size > flat.size:
            return (f"failed to split the output tensor '{spec.target}' in responses: expected "
                    f"at least {start + size} elements in model output, got {flat.size}")
        parts.append(flat[start : start + size].reshape(shape))
        start += size
    return parts


def _source(request: BackendRequest, name: str, target: str) -> np.ndarray:
    """The request's source input of a batch input.

    Raises:
        InvalidArgument: the request does not carry it (Triton's backends fail such a request
            when ``TRITONBACKEND_RequestInput`` finds no input of that name).
    """
    array = request.inputs.get(name)
    if array is None:
        raise InvalidArgument(
            request_prefix(request.request_id) + f"batch input '{target}' needs "
            f"its source input '{name}', which the request does not carry"
        )
    return array


__all__ = ["batch_input_array", "flat_ragged", "scatter"]
