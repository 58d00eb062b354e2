"""gRPC ``ModelInferRequest`` / ``ModelInferResponse`` <-> engine requests/responses.

Follows Triton's gRPC frontend (``infer_handler.cc``): an input names a shared-memory
region in its ``parameters`` or comes in ``raw_input_contents`` (one little-endian buffer
per non-shared-memory input, in input order; BYTES with the 4-byte length prefix) or in
its typed ``contents`` field; outputs are always answered in ``raw_output_contents``, one
entry per output, empty for an output written into a shared-memory region. Raw
fixed-size inputs become numpy views of the received bytes (no copy, no per-element
Python work).
"""

from __future__ import annotations

import re
from typing import Any

from tritonclient.grpc import service_pb2 as pb

from workbench import (
    InferenceRequest,
    InferenceResponse,
    InvalidArgument,
    RequestedOutput,
    Tensor,
    Unsupported,
    tensor_from_buffer,
    tensor_from_list,
    tensor_from_shared_memory,
    tensor_to_buffer,
)
from workbench.frontends.grpc.parameters import (
    SHARED_MEMORY_REGION,
    output_parameters,
    parameter_value,
    set_parameter,
    tensor_parameters,
)
from workbench.frontends.grpc.raw_wire import RawInferRequest, RawInferResponse

#: the request parameter perf_analyzer sends on every gRPC call (Triton accepts it).
EMPTY_FINAL_RESPONSE = "triton_enable_empty_final_response"

#: wire datatype -> the ``InferTensorContents`` field that carries it (Triton's mapping;
#: INT8/INT16 travel in ``int_contents``, UINT8/UINT16 in ``uint_contents``).
CONTENTS_FIELD = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}


def decode_request(message: pb.ModelInferRequest | RawInferRequest) -> tuple[InferenceRequest, bool]:
    """Decode a ``ModelInferRequest`` (or a :class:`~workbench.frontends.grpc.raw_wire.RawInferRequest`,
    whose raw contents are views of the received bytes: the tensors are views of those).

    Inputs whose parameters name a ``shared_memory_region`` become placeholder tensors
    (``workbench.tensor_from_shared_memory``; the engine reads the region); requested
    outputs keep their parameters as plain values (``shared_memory_*``, ``classification``).

    Returns:
        The engine request and whether the client set ``triton_enable_empty_final_response``.

    Raises:
        InvalidArgument: mixed raw/typed contents, contents with shared memory, missing
            data, bad shapes, sizes, datatypes or tensor parameters, reserved ``triton_*``
            parameters (Triton's texts).
        Unsupported: FP16/BF16 in typed contents.
    """
    model = message.model_name
    _check_version_string(message.model_version)
    parameters, empty_final = _request_parameters(message.parameters)
    raw = message.raw_input_contents
    inputs = message.inputs
    request_id = message.id
    if raw:
        tensors = _raw_inputs(inputs, raw, model, request_id)
    else:
        tensors = [_typed_input(tensor, model, request_id) for tensor in inputs]
    request = InferenceRequest(
        model_name=model,
        model_version=message.model_version,
        inputs=tensors,
        outputs=_requested_outputs(message.outputs) if message.outputs else None,
        id=request_id,
        parameters=parameters,
    )
    return request, empty_final


#: what ``std::stol`` reads: optional blanks and sign, then digits (anything may follow)
_STOL = re.compile(r"\s*[+-]?\d")


def _check_version_string(version: str) -> None:
    """Triton's ``GetModelVersionFromString`` for a string ``std::stol`` cannot read."""
    if version and _STOL.match(version) is None:
        raise InvalidArgument(
            f"failed to get model version from specified version string '{version}' "
            "(details: stol), version should be an integral value > 0")


def _request_parameters(raw) -> tuple[dict[str, Any], bool]:
    if not raw:
        return {}, False
    if len(raw) == 1 and EMPTY_FINAL_RESPONSE in raw:  # what perf_analyzer sends on every call
        return {}, bool(parameter_value(raw[EMPTY_FINAL_RESPONSE]))
    parameters, empty_final = {}, False
    for key, parameter in raw.items():
        if key == EMPTY_FINAL_RESPONSE:
            empty_final = bool(parameter_value(parameter))
        elif key.startswith("triton_"):
            raise InvalidArgument(
                "parameter keys starting with 'triton_' are reserved for Triton usage and "
                "should not be specified."
            )
        else:
            parameters[key] = parameter_value(parameter)
    return parameters, empty_final


def _shared_memory_input(
    tensor: pb.ModelInferRequest.InferInputTensor, model: str, request_id: str
) -> Tensor | None:
    """The placeholder for an input in shared memory, or None for an input with data."""
    if not tensor.parameters:
        return None
    params = tensor_parameters(tensor)
    if SHARED_MEMORY_REGION not in params:
        return None
    if tensor.HasField("contents"):
        raise InvalidArgument(
            "unexpected 'content' provided when using shared memory for input tensor "
            f"'{tensor.name}' for model '{model}'"
        )
    return tensor_from_shared_memory(
        tensor.name, tensor.datatype, tensor.shape, params, model=model, request_id=request_id
    )


def _raw_inputs(inputs, raw, model: str, request_id: str) -> list[Tensor]:
    """Inputs with ``raw_input_contents``: the i-th raw buffer belongs to the i-th input
    that is not in shared memory (Triton's order).

    Raises:
        InvalidArgument: Triton's texts; where several inputs' data do not match their shapes
            (byte size, string count), one error naming each of them, joined by "; " (Triton
            names one: the first in its core's unordered input map, not the request's order).
    """
    tensors: list[Tensor] = []
    mismatched: list[str] = []  # every input whose raw data does not match its shape
    next_raw = 0
    for tensor in inputs:
        shared = _shared_memory_input(tensor, model, request_id)
        if shared is not None:
            tensors.append(shared)
            continue
        if tensor.HasField("contents"):
            raise InvalidArgument(
                "contents field must not be specified when using raw_input_contents for "
                f"'{tensor.name}' for model '{model}'"
            )
        if next_raw >= len(raw):
            raise InvalidArgument(
                f"unable to find data for input tensor '{tensor.name}' for model '{model}' in request."
            )
        try:
            tensors.append(tensor_from_buffer(
                tensor.name, tensor.datatype, tensor.shape, raw[next_raw], model=model,
                request_id=request_id))
        except InvalidArgument as exc:
            mismatched.append(str(exc))
        next_raw += 1
    if mismatched:  # all of them, not only the first (Triton names one, in its core's map order)
        rest = [re.sub(r"^\[request id: [^\]]*\] ", "", text) for text in mismatched[1:]]
        raise InvalidArgument("; ".join([mismatched[0], *rest]))
    if next_raw != len(raw):
        raise InvalidArgument(
            f"the number of inputs ({next_raw}) does not match the expected number of "
            f"raw input contents ({len(raw)}) for model '{model}'."
        )
    return tensors


def _typed_input(tensor: pb.ModelInferRequest.InferInputTensor, model: str, request_id: str) -> Tensor:
    shared = _shared_memory_input(tensor, model, request_id)
    if shared is not None:
        return shared
    if not tensor.HasField("contents"):
        raise InvalidArgument(
            f"unable to find data for input tensor '{tensor.name}' for model '{model}' in request."
        )
    field = CONTENTS_FIELD.get(tensor.datatype)
    if field is None:
        if tensor.datatype in ("FP16", "BF16"):
            raise Unsupported(
                f"{tensor.datatype} input '{tensor.name}' must be sent in raw_input_contents: "
                "InferTensorContents has no field for it"
            )
        raise InvalidArgument(f"invalid datatype '{tensor.datatype}' for input '{tensor.name}'")
    values = list(getattr(tensor.contents, field))
    return tensor_from_list(
        tensor.name, tensor.datatype, tensor.shape, values, model=model, request_id=request_id
    )


def _requested_outputs(raw) -> list[RequestedOutput]:
    return [
        RequestedOutput(output.name, output_parameters(output) if output.parameters else {})
        for output in raw
    ]


def encode_response(response: InferenceResponse, final: bool | None = None) -> pb.ModelInferResponse:
    """Build the ``ModelInferResponse`` in one construction: outputs in ``raw_output_contents``.

    An output the engine wrote into a shared-memory region keeps its name, datatype and
    shape and gets an empty ``raw_output_contents`` entry (Triton's gRPC response).
    ``final`` (True / False) adds the response parameter ``triton_final_response``, which
    Triton puts on every stream response (true on a request's last one); None adds none
    (unary ``ModelInfer`` uses :func:`encode_raw_response`, the same bytes with fewer copies).
    """
    message = _response_header(response, final)
    message.raw_output_contents.extend(bytes(buffer) for buffer in _raw_outputs(response))
    return message


def encode_raw_response(response: InferenceResponse) -> RawInferResponse:
    """The unary ``ModelInfer`` answer: :func:`encode_response`'s message without the output
    bytes, which stay views of the output arrays until
    :func:`~workbench.frontends.grpc.raw_wire.serialize_infer_response` writes them (one copy
    instead of three; the same wire bytes)."""
    return RawInferResponse(_response_header(response, None), _raw_outputs(response))


def _raw_outputs(response: InferenceResponse) -> list[bytes | memoryview]:
    return [b"" if SHARED_MEMORY_REGION in t.parameters else tensor_to_buffer(t) for t in response.outputs]


def _response_header(response: InferenceResponse, final: bool | None) -> pb.ModelInferResponse:
    """The response message without ``raw_output_contents``."""
    message = pb.ModelInferResponse(
        model_name=response.model_name,
        model_version=response.model_version,
        id=response.id,
        outputs=[
            pb.ModelInferResponse.InferOutputTensor(
                name=t.name, datatype=t.datatype, shape=t.data.shape
            )
            for t in response.outputs
        ],
    )
    for key, value in response.parameters.items():  # e.g. a Python model's response parameters
        set_parameter(message.parameters[key], value)
    if final is not None:
        message.parameters["triton_final_response"].bool_param = final
    return message
