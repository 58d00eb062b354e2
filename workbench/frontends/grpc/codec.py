"""gRPC ``ModelInferRequest`` / ``ModelInferResponse`` <-> engine requests/responses.

Follows Triton's gRPC frontend (``infer_handler.cc``): inputs come either all in
``raw_input_contents`` (one little-endian buffer per input, in input order; BYTES
with the 4-byte length prefix) or each in its typed ``contents`` field; outputs are
always answered in ``raw_output_contents``. Raw fixed-size inputs become numpy views
of the received bytes (no copy, no per-element Python work).
"""

from __future__ import annotations

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
    tensor_to_buffer,
)

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


def parameter_value(parameter: pb.InferParameter) -> Any:
    """The Python value of an ``InferParameter`` oneof (bool, int, str or float; None if unset)."""
    which = parameter.WhichOneof("parameter_choice")
    return getattr(parameter, which) if which is not None else None


def decode_request(message: pb.ModelInferRequest) -> tuple[InferenceRequest, bool]:
    """Decode a ``ModelInferRequest``.

    Returns:
        The engine request and whether the client set ``triton_enable_empty_final_response``.

    Raises:
        InvalidArgument: mixed raw/typed contents, missing data, bad shapes, sizes or
            datatypes, reserved ``triton_*`` parameters (Triton's texts).
        Unsupported: FP16/BF16 in typed contents; shared-memory inputs or outputs and the
            classification extension (not served yet).
    """
    model = message.model_name
    parameters, empty_final = _request_parameters(message.parameters)
    raw = message.raw_input_contents
    inputs = message.inputs
    if raw and len(raw) != len(inputs):
        raise InvalidArgument(
            f"the number of inputs ({len(inputs)}) does not match the expected number of "
            f"raw input contents ({len(raw)}) for model '{model}'."
        )
    request_id = message.id
    if raw:
        tensors = [_raw_input(tensor, data, model, request_id) for tensor, data in zip(inputs, raw)]
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


def _request_parameters(raw) -> tuple[dict[str, Any], bool]:
    if not raw:
        return {}, False
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


def _check_input_parameters(tensor: pb.ModelInferRequest.InferInputTensor) -> None:
    if "shared_memory_region" in tensor.parameters:
        raise Unsupported("shared memory inputs are not supported by this server yet")


def _raw_input(
    tensor: pb.ModelInferRequest.InferInputTensor, data: bytes, model: str, request_id: str
) -> Tensor:
    if tensor.HasField("contents"):
        raise InvalidArgument(
            "contents field must not be specified when using raw_input_contents for input "
            f"'{tensor.name}' for model '{model}'"
        )
    if tensor.parameters:
        _check_input_parameters(tensor)
    return tensor_from_buffer(
        tensor.name, tensor.datatype, tensor.shape, data, model=model, request_id=request_id
    )


def _typed_input(tensor: pb.ModelInferRequest.InferInputTensor, model: str, request_id: str) -> Tensor:
    if tensor.parameters:
        _check_input_parameters(tensor)
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
    outputs = []
    for output in raw:
        params = {key: parameter_value(value) for key, value in output.parameters.items()}
        for unsupported in ("classification", "shared_memory_region"):
            if unsupported in params:
                raise Unsupported(
                    f"output parameter '{unsupported}' is not supported by this server yet"
                )
        outputs.append(RequestedOutput(output.name, params))
    return outputs


def encode_response(response: InferenceResponse, final: bool = False) -> pb.ModelInferResponse:
    """Build the ``ModelInferResponse`` in one construction: outputs in ``raw_output_contents``.

    ``final`` adds the response parameter ``triton_final_response: true`` (what Triton
    puts on the last stream response of a request).
    """
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
        raw_output_contents=[bytes(tensor_to_buffer(t)) for t in response.outputs],
    )
    if final:
        message.parameters["triton_final_response"].bool_param = True
    return message
