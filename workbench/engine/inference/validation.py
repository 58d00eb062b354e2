"""Request validation against the model config, with Triton's error texts.

Follows Triton core's request normalization (``infer_request.cc``): names,
count of inputs, datatypes, shapes (``-1`` dims are wildcards), the implicit
batch dimension and ``max_batch_size``, requested outputs and ``reshape``.
Messages about one request carry the ``[request id: <id>] `` prefix.
"""

from __future__ import annotations

import numpy as np

from workbench.backends.base import BackendRequest
from workbench.common.errors import InvalidArgument, request_prefix
from workbench.engine.inference.classification import class_count
from workbench.engine.inference.model_io import ModelIO, TensorSpec
from workbench.messages.types import InferenceRequest, Tensor

BATCH_NOTE = (
    "NOTE: Setting a non-zero max_batch_size in the model config requires a batch "
    "dimension to be prepended to each input shape. If you want to specify the full "
    "shape including the batch dim in your input dims config, try setting "
    "max_batch_size to zero. See the model configuration docs for more info on "
    "max_batch_size."
)


def dims_string(dims) -> str:
    """Triton's dims formatting: ``[-1,16]`` (no spaces)."""
    return "[" + ",".join(str(int(d)) for d in dims) + "]"


def validate_request(request: InferenceRequest, io: ModelIO) -> BackendRequest:
    """Check ``request`` against the model's inputs/outputs and build the backend request.

    Returns:
        A :class:`BackendRequest` whose arrays have the config's ``reshape`` applied.

    Raises:
        InvalidArgument: with Triton's text for unknown, duplicate or missing inputs,
            wrong datatype or shape, batch size over ``max_batch_size``, unknown or repeated
            requested outputs,
            a ``classification`` parameter that is not a non-negative integer.
    """
    request_id = request.id  # request_prefix(request_id) is built only for an error
    if request.outputs:
        _check_unique_outputs(request, request_id)
    given = _index_inputs(request, io)
    if len(given) < len(io.required) or any(n not in given for n in io.required):
        raise InvalidArgument(request_prefix(request_id) + _missing_message(given, io))
    batch = None
    inputs: dict[str, np.ndarray] = {}
    for name, tensor in given.items():
        spec = io.inputs[name]
        batch = _check_tensor(tensor, spec, io, batch, request_id)
        inputs[name] = _apply_reshape(tensor.data, spec, io.max_batch_size)
    if batch is not None and io.max_batch_size > 0 and batch > io.max_batch_size:
        raise InvalidArgument(
            request_prefix(request_id) + f"inference request batch-size must be <= {io.max_batch_size} "
            f"for '{io.model_name}'"
        )
    return BackendRequest(inputs, _requested_outputs(request, io), request.parameters,
                          request_id=request.id, batched=io.max_batch_size > 0)


def _check_unique_outputs(request: InferenceRequest, request_id: str) -> None:
    """A requested output named twice is refused, as Triton's core does when the frontend adds
    it (``AddOriginalRequestedOutput``), before any input is looked at."""
    seen: set[str] = set()
    for output in request.outputs or ():
        if output.name in seen:
            raise InvalidArgument(request_prefix(request_id) + f"output '{output.name}' already exists in request")
        seen.add(output.name)


def _index_inputs(request: InferenceRequest, io: ModelIO) -> dict[str, Tensor]:
    given: dict[str, Tensor] = {}
    for tensor in request.inputs:
        if tensor.name not in io.inputs:
            raise InvalidArgument(
                f"unexpected inference input '{tensor.name}' for model '{io.model_name}'"
            )
        if tensor.name in given:
            raise InvalidArgument(f"input '{tensor.name}' already exists in request")
        given[tensor.name] = tensor
    return given


def _missing_message(given: dict[str, Tensor], io: ModelIO) -> str:
    required, total = len(io.required), len(io.inputs)
    expected = (
        f"expected {required} inputs"
        if required == total
        else f"expected number of inputs between {required} and {total}"
    )
    got = ",".join(f"'{n}'" for n in given)
    missing = ",".join(f"'{n}'" for n in io.required if n not in given)
    return (
        f"{expected} but got {len(given)} inputs for model '{io.model_name}'. "
        f"Got input(s) [{got}], but missing required input(s) [{missing}]. "
        "Please provide all required input(s)."
    )


def _check_tensor(
    tensor: Tensor, spec: TensorSpec, io: ModelIO, batch: int | None, request_id: str
) -> int | None:
    if tensor.datatype != spec.wire:
        raise InvalidArgument(
            request_prefix(request_id) + f"inference input '{spec.name}' data-type is '{tensor.datatype}', "
            f"but model '{io.model_name}' expects '{spec.wire}'"
        )
    shape = tensor.data.shape
    item = shape
    if io.max_batch_size > 0:
        if not shape:
            raise InvalidArgument(
                request_prefix(request_id) + f"input '{spec.name}' has no shape but model requires batch "
                f"dimension for '{io.model_name}'"
            )
        if batch is not None and shape[0] != batch:
            raise InvalidArgument(
                request_prefix(request_id) + f"input '{spec.name}' batch size does not match other inputs "
                f"for '{io.model_name}'"
            )
        batch, item = shape[0], shape[1:]
    if not _dims_match(spec.dims, item):
        note = (" " + BATCH_NOTE) if io.max_batch_size > 0 else ""
        raise InvalidArgument(
            request_prefix(request_id) + f"unexpected shape for input '{spec.name}' for model "
            f"'{io.model_name}'. Expected {dims_string(spec.full_dims(io.max_batch_size))}, "
            f"got {dims_string(shape)}.{note}"
        )
    return batch


def _dims_match(dims: tuple[int, ...], shape: tuple[int, ...]) -> bool:
    if dims == shape:
        return True
    if len(dims) != len(shape):
        return False
    return all(d == -1 or d == s for d, s in zip(dims, shape, strict=True))


def _apply_reshape(array: np.ndarray, spec: TensorSpec, max_batch_size: int) -> np.ndarray:
    if spec.reshape is None:
        return array
    lead = array.shape[:1] if max_batch_size > 0 else ()
    item = array.shape[len(lead) :]
    variable = iter(s for d, s in zip(spec.dims, item, strict=True) if d == -1)
    target = tuple(next(variable, -1) if d == -1 else d for d in spec.reshape)
    return array.reshape(lead + target)


def _requested_outputs(request: InferenceRequest, io: ModelIO) -> tuple[str, ...]:
    if not request.outputs:
        return tuple(io.outputs)
    names = []
    for output in request.outputs:
        if output.name not in io.outputs:
            raise InvalidArgument(
                f"unexpected inference output '{output.name}' for model '{io.model_name}'"
            )
        if "classification" in output.parameters:
            class_count(output.parameters["classification"])
        names.append(output.name)
    return tuple(names)
