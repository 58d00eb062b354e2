"""Triton's generate extension: a flat JSON body <-> an engine request, a response <-> flat JSON.

Request (``http_server.cc``'s ``ConvertGenerateRequest`` / ``ExactMappingInput``): each
top-level member, in document order, whose name is an input of the model becomes that input
(a JSON scalar or 1-D array; its shape is the model's input shape with the element count put
in the innermost variable dimension, the others 1); every other member becomes a request
parameter (a string, integer, boolean or number). The reserved member ``parameters`` is an
object read the same way (inputs or parameters). ``id`` is the request id (and, as in Triton,
also a parameter). Duplicate members are kept so that a repeated input is refused.

Response (``FinalizeResponse``): ``model_name``, ``model_version`` (a string), ``id`` when the
request had one, each response parameter and each output by name: its elements as a JSON
array, or the one element itself when there is exactly one.
"""

from __future__ import annotations

import json
import math
from typing import Any

from workbench import (
    InferenceRequest,
    InferenceResponse,
    InvalidArgument,
    Tensor,
    tensor_from_list,
    tensor_to_list,
)
from workbench.common.results import TensorMetadata
from workbench.frontends.http.codec import request_parameters
from workbench.frontends.http.json_tensor import NOT_STRING, json_data

#: the reserved nested member (Triton's generate mapping schema)
PARAMETERS = "parameters"
#: bytes per element of the fixed-size wire types
_ITEMSIZE = {"BOOL": 1, "INT8": 1, "UINT8": 1, "INT16": 2, "UINT16": 2, "FP16": 2, "BF16": 2,
             "INT32": 4, "UINT32": 4, "FP32": 4, "INT64": 8, "UINT64": 8, "FP64": 8}


class Members(list):
    """A JSON object as its ``(key, value)`` pairs in document order, duplicates kept."""


def parse_generate_body(body: bytes) -> Members:
    """The body's top-level members (nested objects are :class:`Members` too).

    Raises:
        InvalidArgument: "failed to parse the request JSON buffer: ..." (not JSON, or not
            an object).
    """
    try:
        parsed = json.loads(body, object_pairs_hook=Members)
    except (ValueError, RecursionError) as exc:
        raise InvalidArgument(f"failed to parse the request JSON buffer: {exc}") from None
    if not isinstance(parsed, Members):
        raise InvalidArgument("failed to parse the request JSON buffer: expected an object")
    return parsed


def generate_request(
    members: Members, model: str, version: str, inputs: list[TensorMetadata], max_input_size: int
) -> InferenceRequest:
    """The engine request for a generate body.

    Args:
        members: :func:`parse_generate_body`'s result.
        inputs: the model metadata's ``inputs`` (``name``, ``datatype``, ``shape`` with -1
            for variable dimensions, the batch dimension included).
        max_input_size: ``--http-max-input-size``: the most bytes all inputs may hold.

    Raises:
        InvalidArgument: Triton's texts: a non-string ``id`` ("Unable to parse 'id': ..."),
            an input of the wrong JSON type ("attempt to access JSON non-string as string"),
            a repeated input ("input 'X' already exists in request"), inputs over
            ``max_input_size``, a value whose element count fits no shape of the input, a
            parameter that is an object or array ("parameter 'K' has invalid type. ..."),
            ``parameters`` that is not an object ("Expected JSON object for keyword:
            'parameters'").
    """
    request_id = ""
    for key, value in members:
        if key == "id":
            if not isinstance(value, str):
                raise InvalidArgument(f"Unable to parse 'id': {NOT_STRING}")
            request_id = value
            break
    converter = _Converter({item["name"]: item for item in inputs}, model, request_id, max_input_size)
    converter.convert(members, nested=False)
    parameters = request_parameters(converter.parameters)
    return InferenceRequest(model, converter.tensors, model_version=version, id=request_id,
                            parameters=parameters)


class _Converter:
    """One generate body's inputs and parameters, collected member by member."""

    def __init__(self, inputs: dict[str, TensorMetadata], model: str, request_id: str, limit: int) -> None:
        self.inputs = inputs
        self.model = model
        self.request_id = request_id
        self.limit = limit
        self.consumed = 0
        self.tensors: list[Tensor] = []
        self.parameters: dict[str, Any] = {}

    def convert(self, members: Members, nested: bool) -> None:
        for key, value in members:
            if key == PARAMETERS and not nested:
                self._nested(value)
            elif key in self.inputs:
                self._input(key, value)
            elif isinstance(value, (Members, list)) or value is None:
                raise InvalidArgument(
                    f"parameter '{key}' has invalid type. It should be either 'int', 'bool', "
                    "or 'string'."
                )
            else:
                self.parameters[key] = value

    def _nested(self, value: object) -> None:
        if PARAMETERS in self.inputs:
            raise InvalidArgument(
                f"Keyword '{PARAMETERS}' for nested schema also given as input tensor name")
        if not isinstance(value, Members):
            raise InvalidArgument(f"Expected JSON object for keyword: '{PARAMETERS}': "
                                  "attempt to access JSON non-object as object")
        try:
            self.convert(value, nested=True)
        except InvalidArgument as exc:
            raise InvalidArgument(f"Converting keyword: '{PARAMETERS}': {exc.message}") from None

    def _input(self, name: str, value: object) -> None:
        if any(t.name == name for t in self.tensors):
            raise InvalidArgument(f"input '{name}' already exists in request")
        meta = self.inputs[name]
        datatype = meta["datatype"]
        # a JSON object (Members) is no element of any datatype: json_data refuses it
        flat = json_data(datatype, value if type(value) is list else [value])
        if datatype == "BYTES":
            size = sum(len(v.encode("utf-8")) + 4 for v in flat)
        else:
            size = len(flat) * _ITEMSIZE.get(datatype, 0)
        if size and self.consumed + size > self.limit:
            raise InvalidArgument(
                f"request size of {self.consumed} bytes with input '{name}' of size {size} "
                f"bytes exceeds the maximum allowed input size of {self.limit}. Use "
                "--http-max-input-size to increase the limit."
            )
        self.consumed += size
        shape = _shape(name, list(meta["shape"]), len(flat))
        self.tensors.append(tensor_from_list(name, datatype, shape, flat, model=self.model,
                                             request_id=self.request_id))


def _shape(name: str, dims: list[int], count: int) -> list[int]:
    """Triton's two passes: the fixed dimensions must divide ``count``; the innermost
    variable dimension takes what is left, other variable ones are 1.

    Raises:
        InvalidArgument: "The schema can not convert input 'X' to tensor with proper shape".
    """
    refused = InvalidArgument(f"The schema can not convert input '{name}' to tensor with proper shape")
    left = count
    for dim in dims:
        if dim != -1:
            if dim == 0 or left % dim:
                if dim == 0 and left == 0:
                    continue
                raise refused
            left //= dim
    for index in range(len(dims) - 1, -1, -1):
        if dims[index] == -1:
            dims[index], left = left, 1
    if left != 1 and not (count == 0 and math.prod(d for d in dims) == 0):
        raise refused
    return dims


def generate_response(response: InferenceResponse) -> dict[str, Any]:
    """The flat JSON object of one response (see the module docstring)."""
    answer: dict[str, Any] = {"model_name": response.model_name,
                              "model_version": str(response.model_version)}
    if response.id:
        answer["id"] = response.id
    answer.update(response.parameters)
    for tensor in response.outputs:
        values = tensor_to_list(tensor)
        answer[tensor.name] = values[0] if len(values) == 1 else values
    return answer


__all__ = ["Members", "generate_request", "generate_response", "parse_generate_body"]
