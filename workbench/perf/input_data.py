"""perf_analyzer's ``--input-data`` JSON file, read into numpy arrays.

The format (perf_analyzer's ``DataLoader``)::

    {"data": [
        {"INPUT0": [1, 2, 3, 4]},                                  # flat or nested list
        {"INPUT0": {"content": [1, 2, 3, 4], "shape": [2, 2]}},    # values with their shape
        {"INPUT0": {"b64": "AAAAAAAAgD8..."}}                      # raw little-endian bytes
    ]}

Every entry holds one sample of every non-optional input, shaped without the batch
dimension (``shape`` overrides the model's dims and ``--shape``; it must keep the rank and
the fixed dims). BYTES values are strings (UTF-8 encoded) or, as ``b64``, Triton's
serialized form (4-byte little-endian length before each element). A ``"model"`` key is
allowed and ignored. ``data`` may also hold arrays of entries (perf_analyzer's sequence
streams): they are read one after the other. ``validation_data`` is ignored.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping, Sequence

import numpy as np
from tritonclient.utils import deserialize_bytes_tensor, triton_to_np_dtype

from workbench.perf.errors import PerfError
from workbench.perf.model_info import InputSpec, ModelInfo


def resolve_dims(spec: InputSpec, shapes: Mapping[str, Sequence[int]],
                 element_count: int | None) -> tuple[int, ...]:
    """The shape (without batch dimension) one sample of ``spec`` is sent with.

    A ``--shape`` override wins over the model's dims, and must keep their rank and fixed
    dims (perf_analyzer's ``ValidateTensorShape``).

    Args:
        element_count: the sample's value count when read from a file (checked against
            the shape), None for generated data.

    Raises:
        PerfError: a dynamic dim left unresolved, an incompatible override, or a value
            count that does not fill the shape (perf_analyzer's messages).
    """
    dims = tuple(int(d) for d in shapes.get(spec.name, spec.dims))
    return _checked(spec, dims, element_count)


def _checked(spec: InputSpec, dims: tuple[int, ...], element_count: int | None) -> tuple[int, ...]:
    if any(d < 0 for d in dims):
        raise PerfError(f'The variable-sized tensor "{spec.name}" with model shape {list(spec.dims)} '
                        "needs to have its shape fully defined. See the --shape option.")
    if len(dims) != len(spec.dims) or any(m not in (-1, d) for m, d in zip(spec.dims, dims, strict=True)):
        raise PerfError(f'The supplied shape of {list(dims)} for input "{spec.name}" is '
                        f"incompatible with the model's input shape of {list(spec.dims)}")
    expected = int(np.prod(dims, dtype=np.int64))
    if element_count is not None and element_count != expected:
        raise PerfError(f"mismatch in the data provided for {spec.name}. Expected: {expected} "
                        f"elements for shape {list(dims)}, Got: {element_count} elements")
    return dims


def load_input_data(path: str, info: ModelInfo,
                    shapes: Mapping[str, Sequence[int]]) -> list[dict[str, np.ndarray]]:
    """Read a data file: one dict per entry, input name -> one sample (no batch dim).

    Arrays have the input's numpy dtype (BYTES: object arrays of ``bytes``).

    Raises:
        PerfError: the file cannot be read or parsed, has no ``data`` list, an entry misses
            a non-optional input or names something that is not an input, or a value does
            not fit its shape or datatype.
    """
    entries = _entries(path)
    if not entries:
        raise PerfError(f"'{path}' has no entries in its data field")
    specs = {spec.name: spec for spec in info.inputs}
    return [_entry(index, entry, specs, shapes) for index, entry in enumerate(entries)]


def _entries(path: str) -> list:
    try:
        with open(path, encoding="utf-8") as file:
            document = json.load(file)
    except (OSError, ValueError) as exc:
        raise PerfError(f"failed to read the input data file '{path}': {exc}") from None
    if not isinstance(document, dict) or not isinstance(document.get("data"), list):
        raise PerfError(f"The json file '{path}' doesn't contain data field")
    entries: list = []
    for item in document["data"]:
        entries.extend(item if isinstance(item, list) else [item])  # streams, in order
    return entries


def _entry(index: int, entry: object, specs: dict[str, InputSpec],
           shapes: Mapping[str, Sequence[int]]) -> dict[str, np.ndarray]:
    if not isinstance(entry, dict):
        raise PerfError(f"Input data file is malformed: entry {index} is not an object")
    unknown = sorted(set(entry) - set(specs) - {"model"})
    if unknown:
        raise PerfError(f"The input or output '{unknown[0]}' is not found in the model configuration")
    arrays = {}
    for name, spec in specs.items():
        if name in entry:
            arrays[name] = _tensor(spec, entry[name], shapes, index)
        elif not spec.optional:
            raise PerfError(f"missing tensor {name} (entry {index} of the input data)")
    return arrays


def _tensor(spec: InputSpec, value: object, shapes: Mapping[str, Sequence[int]], index: int) -> np.ndarray:
    given_shape = None
    if isinstance(value, dict):
        given_shape = value.get("shape")
        if "b64" in value:
            flat = _from_b64(spec, value["b64"], index)
        elif "content" in value:
            flat = _from_list(spec, value["content"], index)
        else:
            raise PerfError(f"missing content field (input {spec.name}, entry {index})")
    elif isinstance(value, list):
        flat = _from_list(spec, value, index)
    else:
        raise PerfError(f"Input data file is malformed: input {spec.name} of entry {index} is "
                        "neither a list nor an object")
    if given_shape is not None:
        if not isinstance(given_shape, list) or not all(isinstance(d, int) for d in given_shape):
            raise PerfError("shape values must be integers.")
        dims = _checked(spec, tuple(given_shape), flat.size)
    else:
        dims = resolve_dims(spec, shapes, flat.size)
    return flat.reshape(dims)


def _from_list(spec: InputSpec, content: object, index: int) -> np.ndarray:
    values = list(_flatten(content))
    try:
        if spec.datatype == "BYTES":
            data = np.empty(len(values), dtype=object)
            data[:] = [v.encode() if isinstance(v, str) else _bytes(v) for v in values]
            return data
        return np.asarray(values, dtype=triton_to_np_dtype(spec.datatype))
    except (TypeError, ValueError, OverflowError) as exc:
        raise PerfError(f"values of input {spec.name} in entry {index} do not fit "
                        f"{spec.datatype}: {exc}") from None


def _bytes(value: object) -> bytes:
    if isinstance(value, (int, float, bool)):
        return str(value).encode()
    raise TypeError(f"{value!r} is not a string")


def _flatten(content: object):
    if isinstance(content, list):
        for item in content:
            yield from _flatten(item)
    else:
        yield content


def _from_b64(spec: InputSpec, encoded: object, index: int) -> np.ndarray:
    if not isinstance(encoded, str):
        raise PerfError(f"the value of b64 field should be of type string (input {spec.name}, "
                        f"entry {index})")
    try:
        raw = base64.b64decode(encoded, validate=True)
    except binascii.Error as exc:
        raise PerfError(f"invalid b64 data for input {spec.name} in entry {index}: {exc}") from None
    if spec.datatype == "BYTES":
        decoded = deserialize_bytes_tensor(raw)
        return decoded if decoded is not None else np.empty(0, dtype=object)
    dtype = np.dtype(triton_to_np_dtype(spec.datatype)).newbyteorder("<")
    if len(raw) % dtype.itemsize:
        raise PerfError(f"b64 data of input {spec.name} in entry {index} is {len(raw)} bytes, not "
                        f"a multiple of {spec.datatype}'s {dtype.itemsize}")
    return np.frombuffer(raw, dtype).astype(dtype.newbyteorder("="))
