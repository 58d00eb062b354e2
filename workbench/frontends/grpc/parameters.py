"""``InferParameter`` maps of gRPC tensors -> plain Python parameters, with Triton's checks.

Follows Triton's ``grpc_utils`` (``ParseSharedMemoryParams``, ``ParseClassificationParams``)
and ``infer_handler.h``: ``shared_memory_region`` is a ``string_param``,
``shared_memory_offset`` / ``shared_memory_byte_size`` are ``int64_param`` and need the
region, the byte size is required with a region; ``classification`` is a positive
``int64_param`` and excludes shared memory.
"""

from __future__ import annotations

from typing import Any

from tritonclient.grpc import service_pb2 as pb

from workbench import InvalidArgument
from workbench.frontends.output_parameters import SHARED_MEMORY_REGION, check_shared_memory_output

SHARED_MEMORY_OFFSET = "shared_memory_offset"
SHARED_MEMORY_BYTE_SIZE = "shared_memory_byte_size"
CLASSIFICATION = "classification"


def parameter_value(parameter: pb.InferParameter) -> Any:
    """The Python value of an ``InferParameter`` oneof (bool, int, str or float; None if unset)."""
    which = parameter.WhichOneof("parameter_choice")
    return getattr(parameter, which) if which is not None else None


def _expect(parameter: pb.InferParameter, choice: str, message: str) -> Any:
    if parameter.WhichOneof("parameter_choice") != choice:
        raise InvalidArgument(message)
    return getattr(parameter, choice)


def tensor_parameters(tensor: Any) -> dict[str, Any]:
    """Plain parameters of an input or requested-output tensor message.

    The shared-memory keys become ``shared_memory_region`` (str), ``shared_memory_offset``
    and ``shared_memory_byte_size`` (ints, bytes), as ``workbench.tensor_from_shared_memory``
    and ``RequestedOutput.parameters`` take them; other keys keep their oneof's value.

    Raises:
        InvalidArgument: Triton's texts for a wrong oneof type, an offset or byte size
            without a region, or a region without a byte size.
    """
    raw = tensor.parameters
    params = {key: parameter_value(value) for key, value in raw.items()}
    name = tensor.name
    has_region = SHARED_MEMORY_REGION in raw
    if has_region:
        _expect(raw[SHARED_MEMORY_REGION], "string_param",
                f"invalid value type for '{SHARED_MEMORY_REGION}' parameter for tensor '{name}', "
                "expected string_param.")
    for key in (SHARED_MEMORY_OFFSET, SHARED_MEMORY_BYTE_SIZE):
        if key not in raw:
            continue
        if not has_region:
            raise InvalidArgument(f"'{key}' can not be specified without '{SHARED_MEMORY_REGION}' "
                                  f"parameter for tensor '{name}'")
        _expect(raw[key], "int64_param",
                f"invalid value type for '{key}' parameter for tensor '{name}', expected int64_param.")
    if has_region and SHARED_MEMORY_BYTE_SIZE not in raw:
        raise InvalidArgument(f"'{SHARED_MEMORY_BYTE_SIZE}' must be specified along with "
                              f"'{SHARED_MEMORY_REGION}' parameter for tensor '{name}'")
    return params


def output_parameters(output: pb.ModelInferRequest.InferRequestedOutputTensor) -> dict[str, Any]:
    """:func:`tensor_parameters` of a requested output, plus Triton's classification rules.

    Raises:
        InvalidArgument: as :func:`tensor_parameters`; ``classification`` not an
            ``int64_param`` or not positive; shared memory together with classification
            ("output can't set both 'shared_memory_region' and 'classification'").
    """
    params = tensor_parameters(output)
    if CLASSIFICATION in output.parameters:
        count = _expect(output.parameters[CLASSIFICATION], "int64_param",
                        "invalid value type for 'classification' parameter, expected int64_param")
        if count <= 0:
            raise InvalidArgument("invalid value for 'classification' parameter, expected >= 0")
    check_shared_memory_output(params, others=(CLASSIFICATION,), subject="output")
    return params


def set_parameter(target: pb.InferParameter, value: Any) -> None:
    """Write a Python value into an ``InferParameter``: bool -> ``bool_param``, int ->
    ``int64_param``, float -> ``double_param``, anything else -> ``string_param`` (str())."""
    if isinstance(value, bool):
        target.bool_param = value
    elif isinstance(value, int):
        target.int64_param = value
    elif isinstance(value, float):
        target.double_param = value
    else:
        target.string_param = str(value)
