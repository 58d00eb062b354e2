"""HTTP infer bodies <-> engine requests/responses (JSON + binary tensor extension).

Request body: a JSON header, optionally followed by raw tensors in input order
when ``Inference-Header-Content-Length`` gives the header's length (Triton's
binary tensor data extension). Fixed-size binary tensors become numpy views of
the body (no copy, no per-element Python work).
Inputs and outputs may name a shared-memory region instead (``shared_memory_region``
parameters): the engine reads and writes those, and such outputs are encoded without data.
"""

from __future__ import annotations

import json
import math
from typing import Any

import orjson

from workbench import (
    InferenceRequest,
    InferenceResponse,
    InvalidArgument,
    RequestedOutput,
    Tensor,
    tensor_from_buffer,
    tensor_from_list,
    tensor_from_shared_memory,
    tensor_to_buffer,
    tensor_to_list,
)
from workbench.frontends.http.json_tensor import (
    NOT_BOOL,
    NOT_STRING,
    NOT_UINT,
    json_data,
    json_shape,
)
from workbench.frontends.output_parameters import check_shared_memory_output
from workbench.messages.tensors import check_shape

HEADER_LENGTH = "inference-header-content-length"


def decode_request(
    body: bytes, header_length: str | None, model_name: str, model_version: str
) -> InferenceRequest:
    """Parse an infer request body.

    Raises:
        InvalidArgument: malformed JSON, header length, inputs or tensor data (Triton's texts).
    """
    json_end = json_header_end(header_length, len(body))
    if json_end == 0:
        raise InvalidArgument("a raw binary request (Inference-Header-Content-Length: 0) has "
                              "no JSON header to decode")
    view = memoryview(body)
    header = parse_json_object(view[:json_end])
    inputs_json = header.get("inputs")
    if not isinstance(inputs_json, list):
        raise InvalidArgument("Unable to parse 'inputs'")
    request_id = header.get("id", "")
    if not isinstance(request_id, str):
        raise InvalidArgument(f"Unable to parse 'id': {NOT_STRING}")
    parameters = request_parameters(header.get("parameters"))
    offset, inputs = json_end, []
    for item in inputs_json:
        tensor, offset = _decode_input(item, view, offset, model_name, request_id)
        inputs.append(tensor)
    return InferenceRequest(
        model_name=model_name,
        model_version=model_version,
        inputs=inputs,
        outputs=_requested_outputs(header.get("outputs")),
        id=request_id,
        parameters=parameters,
    )


def json_header_end(header_length: str | None, body_length: int) -> int:
    """Where the JSON header ends in a body of ``body_length`` bytes: the whole body without
    ``Inference-Header-Content-Length``, else its value; 0 means a raw binary request (no JSON,
    the body is the single input: :mod:`workbench.frontends.http.raw_binary`).

    Raises:
        InvalidArgument: the header is not an integer, or outside ``[0, body_length]``
            (Triton's texts, ``GetInferenceHeaderLength``).
    """
    if header_length is None:
        return body_length
    try:
        length = int(header_length)
    except ValueError:
        raise InvalidArgument(
            f"Unable to parse Inference-Header-Content-Length, got: {header_length}"
        ) from None
    if not -(2**31) <= length < 2**31:  # std::stoi's range in Triton
        raise InvalidArgument(
            "Unable to parse Inference-Header-Content-Length, value is out of range "
            f"[ {-(2**31)}, {2**31 - 1} ], got: {header_length}"
        )
    if length < 0 or length > body_length:
        raise InvalidArgument(
            f"inference header size should be in range (0, {body_length}), got: {header_length}"
        )
    return length


def parse_json_object(raw: bytes | memoryview) -> dict[str, Any]:
    """Parse a JSON object body (every JSON-body route's parser).

    Nesting is bounded: orjson refuses past 1024 levels, and the NaN-literal fallback's
    RecursionError is refused too, so a deeply nested body is the client's error.

    Raises:
        InvalidArgument: "failed to parse the request JSON buffer: ..." for invalid or too
            deeply nested JSON, or a body that is not an object.
    """
    try:
        header = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        header = _parse_json_with_nan(raw, exc)
    if not isinstance(header, dict):
        raise InvalidArgument("failed to parse the request JSON buffer: expected an object")
    return header


def _parse_json_with_nan(raw: bytes | memoryview, error: Exception) -> Any:
    """Slow path: tritonclient writes NaN/Infinity literals for non-finite floats, which
    strict JSON (orjson) refuses; Python's json module reads them."""
    try:
        return json.loads(bytes(raw))
    except (ValueError, RecursionError):
        raise InvalidArgument(f"failed to parse the request JSON buffer: {error}") from None


#: request parameters Triton's HTTP frontend reads itself: key -> (allowed types, its text)
_TYPED_PARAMETERS: dict[str, tuple[tuple[type, ...], str]] = {
    "sequence_id": ((int, str), NOT_STRING),
    "sequence_start": ((bool,), NOT_BOOL),
    "sequence_end": ((bool,), NOT_BOOL),
    "binary_data_output": ((bool,), NOT_BOOL),
    "priority": ((int,), NOT_UINT),
    "timeout": ((int,), NOT_UINT),
}


def request_parameters(raw: object) -> dict[str, Any]:
    """The request's ``parameters`` with Triton's type rules (``ParseJsonTritonParams``):
    ``sequence_id`` an unsigned integer or a string; ``sequence_start`` / ``sequence_end`` /
    ``binary_data_output`` booleans; ``priority`` / ``timeout`` unsigned integers; other keys
    a string, integer, boolean or number (``headers`` is left to the engine).

    Raises:
        InvalidArgument: Triton's texts ("Unable to parse 'priority': ...", "parameter 'k'
            has invalid type. It should be either 'int', 'bool', or 'string'.", the
            reserved ``triton_`` prefix).
    """
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise InvalidArgument("Unable to parse 'parameters'")
    for key, value in raw.items():
        if key in _TYPED_PARAMETERS:
            types, text = _TYPED_PARAMETERS[key]
            bad_int = type(value) is int and not 0 <= value < 2**64
            if not isinstance(value, types) or (bool not in types and type(value) is bool) or bad_int:
                raise InvalidArgument(f"Unable to parse '{key}': {text}")
        elif key.startswith("triton_"):
            raise InvalidArgument(
                "parameter keys starting with 'triton_' are reserved for Triton usage and "
                "should not be specified."
            )
        elif key != "headers" and not isinstance(value, (str, int, float)):
            raise InvalidArgument(
                f"parameter '{key}' has invalid type. It should be either 'int', 'bool', or "
                "'string'."
            )
    return raw


def _object(value: object, what: str) -> dict:
    """An optional JSON object member (``parameters`` of an input or output); None is {}."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidArgument(f"Unable to parse '{what}': attempt to access JSON non-object as object")
    return value


def _decode_input(
    item: object, view: memoryview, offset: int, model: str, request_id: str
) -> tuple[Tensor, int]:
    if not isinstance(item, dict) or "name" not in item:
        raise InvalidArgument("Unable to parse 'inputs': each input needs a 'name'")
    name, datatype = item["name"], item.get("datatype")
    if not isinstance(name, str):
        raise InvalidArgument(f"Unable to parse 'name': {NOT_STRING}")
    if not isinstance(datatype, str):
        raise InvalidArgument(f"Unable to parse 'datatype': {NOT_STRING}")
    shape = json_shape(item)
    params = _object(item.get("parameters"), "parameters")
    _check_input_fields(item, params)
    if "shared_memory_region" in params:
        tensor = tensor_from_shared_memory(name, datatype, shape, params, model=model, request_id=request_id)
        return tensor, offset
    if "data" in item:
        data = json_data(datatype, item["data"])
        if datatype in _COUNTED_HERE:  # BYTES: the core counts the strings (tensor_from_list)
            _check_element_count(name, shape, len(data), model, request_id)
        tensor = tensor_from_list(name, datatype, shape, data, model=model, request_id=request_id)
        return tensor, offset
    size = _binary_size(params["binary_data_size"], name)
    if offset + size > len(view):
        raise InvalidArgument(
            f"unexpected size for input '{name}', expecting {offset + size - len(view)} "
            f"additional bytes for model '{model}'"
        )
    chunk = view[offset : offset + size]
    tensor = tensor_from_buffer(name, datatype, shape, chunk, model=model, request_id=request_id)
    return tensor, offset + size


#: JSON datatypes whose element count this frontend checks itself (Triton's HTTP frontend);
#: FP16/BF16 are refused over JSON, BYTES elements are counted by the core
_COUNTED_HERE = frozenset({"BOOL", "INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16",
                           "UINT32", "UINT64", "FP32", "FP64"})


def _check_element_count(name: str, shape: list[int], got: int, model: str, request_id: str) -> None:
    """A JSON ``data`` array must hold exactly the shape's element count (Triton's HTTP
    frontend, ``ReadDataFromJson``: one text for too few elements, another for too many).

    Raises:
        InvalidArgument: "Failed to parse 'data' field: shape does not match true shape" (too
            few) or "Unable to parse 'data': Shape does not match true shape of 'data' field"
            (too many); a bad shape's own text first (:func:`workbench.messages.tensors.check_shape`).
    """
    count = math.prod(check_shape(name, shape, model, request_id))
    if count * 8 > 2**63 - 1:  # may overflow the byte size: tensor_from_list says so (Triton's order)
        return
    if got < count:
        raise InvalidArgument("Failed to parse 'data' field: shape does not match true shape")
    if got > count:
        raise InvalidArgument("Unable to parse 'data': Shape does not match true shape of 'data' field")


def _check_input_fields(item: dict, params: dict) -> None:
    """Exactly one of data, binary_data_size, shared_memory_region (Triton's text)."""
    if ("data" in item) + ("binary_data_size" in params) + ("shared_memory_region" in params) == 1:
        return  # the usual case: no list built
    fields = [f"'{key}'" for key, present in (
        ("data", "data" in item),
        ("binary_data_size", "binary_data_size" in params),
        ("shared_memory_region", "shared_memory_region" in params),
    ) if present]
    if len(fields) != 1:
        raise InvalidArgument(
            "Input must set only one of the following fields: 'data', 'binary_data_size' in "
            "'parameters', 'shared_memory_region' in 'parameters'. But "
            + ("no field is set" if not fields else "set " + " ".join(fields))
        )


def _binary_size(raw: object, name: str) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 0:
        raise InvalidArgument(f"Unable to parse 'binary_data_size' for input '{name}'")
    return raw


def _requested_outputs(raw: object) -> list[RequestedOutput] | None:
    if raw is None:
        return None
    if not isinstance(raw, list):
        raise InvalidArgument("Unable to parse 'outputs'")
    outputs = []
    for item in raw:
        if not isinstance(item, dict) or "name" not in item:
            raise InvalidArgument("Unable to parse 'outputs': each output needs a 'name'")
        if not isinstance(item["name"], str):
            raise InvalidArgument(f"Unable to parse 'name': {NOT_STRING}")
        params = _object(item.get("parameters"), "parameters")
        check_shared_memory_output(params)
        outputs.append(RequestedOutput(item["name"], params))
    return outputs


def output_is_binary(request: InferenceRequest):
    """``binary(tensor) -> bool`` for ``request``'s outputs, Triton's rule
    (``ParseJsonTritonIO``): an output the request names is binary only when its own
    ``binary_data`` parameter is true; the request's ``binary_data_output`` parameter is the
    default of the outputs it does not name (all of them when it names none)."""
    default = bool(request.parameters.get("binary_data_output", False))
    named = {output.name for output in request.outputs or ()}

    def binary(tensor: Tensor) -> bool:
        return bool(tensor.parameters.get("binary_data", tensor.name not in named and default))

    return binary


def encode_response(
    response: InferenceResponse, request: InferenceRequest
) -> tuple[bytes, int | None]:
    """Encode a response body; returns ``(body, json header length or None)``.

    An output is binary as :func:`output_is_binary` says (Triton's rule). With any binary
    output the header length is returned (``Inference-Header-Content-Length``).
    """
    chunks, length = encode_response_chunks(response, request)
    return (bytes(chunks[0]) if len(chunks) == 1 else b"".join(chunks)), length


def encode_response_chunks(
    response: InferenceResponse, request: InferenceRequest
) -> tuple[list[bytes | memoryview], int | None]:
    """:func:`encode_response`'s body as the JSON header followed by each binary output's bytes
    (views of the output arrays where possible), for a writer that sends them in turn without
    joining them (a 64 MiB output is not copied once more); the same bytes in the same order."""
    binary = output_is_binary(request)
    outputs: list[dict[str, Any]] = []
    chunks: list[bytes | memoryview] = []
    for tensor in response.outputs:
        entry: dict[str, Any] = {
            "name": tensor.name,
            "datatype": tensor.datatype,
            "shape": list(tensor.data.shape),
        }
        if "shared_memory_region" in tensor.parameters:
            pass  # written into the client's region: no data, no parameters (Triton)
        elif binary(tensor):
            chunk = tensor_to_buffer(tensor)
            entry["parameters"] = {"binary_data_size": len(chunk)}
            chunks.append(chunk)
        else:
            entry["data"] = _json_data(tensor, response.model_name)
        outputs.append(entry)
    header: dict[str, Any] = {"model_name": response.model_name, "model_version": response.model_version}
    if response.id:
        header["id"] = response.id
    if response.parameters:
        header["parameters"] = response.parameters
    header["outputs"] = outputs
    head = orjson.dumps(header, option=orjson.OPT_SERIALIZE_NUMPY)
    if not chunks:
        return [head], None
    return [head, *chunks], len(head)


def _json_data(tensor: Tensor, model: str) -> object:
    """An output's JSON ``data``.

    Raises:
        InvalidArgument: a BYTES output that is not UTF-8 (binary data carries it intact); a
            BF16 output (Triton's text: binary data only).
    """
    if tensor.datatype == "BF16":
        raise InvalidArgument("sending BF16 data via JSON is not supported. Please use the binary "
                              "data format for output")
    if tensor.datatype in ("BYTES", "FP16"):
        try:
            return tensor_to_list(tensor)
        except UnicodeDecodeError:
            raise InvalidArgument(
                f"output '{tensor.name}' of model '{model}' holds BYTES that are not valid "
                "UTF-8, so they cannot be sent as JSON; request it with \"binary_data\": true"
            ) from None
    return tensor.data.ravel()  # orjson serializes numpy arrays natively (no Python loop)
