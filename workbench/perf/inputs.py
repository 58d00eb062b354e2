"""The tensors a measurement sends: random, zeros, or perf_analyzer ``--input-data`` entries.

As perf_analyzer, synthetic data is generated once and every request carries the same
tensors; real data from a JSON file is sent round-robin, one entry (or, with a batch size
b > 1, b consecutive entries stacked) per request.

Random data (perf_analyzer's default): floating types uniform in [0, 1); integer types
uniform in [0, 100) (so that small lookup tables survive; perf_analyzer fills raw random
bytes); BOOL uniform; BYTES strings of ``string_length`` random letters and digits, or
``string_data``. Models whose inputs are indices into small tables (token type ids, class
ids) want ``zero`` or real data. As in perf_analyzer, ``zero`` leaves BYTES inputs random.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
from tritonclient.utils import triton_to_np_dtype

from workbench import Tensor
from workbench.perf.errors import PerfError
from workbench.perf.input_data import load_input_data, resolve_dims
from workbench.perf.model_info import InputSpec, ModelInfo
from workbench.perf.options import PerfOptions

_ALPHABET = np.frombuffer(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", np.uint8)
#: random integers are drawn from [0, RANDOM_INT_HIGH)
RANDOM_INT_HIGH = 100


def numpy_dtype(datatype: str) -> np.dtype:
    """The numpy dtype of a wire datatype (BYTES -> object).

    Raises:
        PerfError: a datatype tritonclient does not know.
    """
    dtype = triton_to_np_dtype(datatype)
    if dtype is None:
        raise PerfError(f"unsupported input datatype '{datatype}'")
    return np.dtype(dtype)


def check_batch_size(info: ModelInfo, batch_size: int) -> None:
    """perf_analyzer's batch-size checks, with its messages.

    Raises:
        PerfError: batch > 1 for a model without batching, or above ``max_batch_size``.
    """
    if info.max_batch_size == 0 and batch_size > 1:
        raise PerfError("can not specify batch size > 1 as the model does not support batching")
    if info.max_batch_size and batch_size > info.max_batch_size:
        raise PerfError(f"expecting batch size <= {info.max_batch_size} for model '{info.name}'")


def request_tensors(info: ModelInfo, options: PerfOptions) -> list[list[Tensor]]:
    """The distinct requests of a measurement, each a list of input tensors.

    Shapes include the batch dimension (``options.batch_size`` rows) when the model batches.
    Synthetic data gives one request; a data file gives one per entry (fewer when batches of
    consecutive entries repeat).

    Raises:
        PerfError: a batch size the model refuses, a dynamic dim without ``--shape``, a
            datatype without numpy equivalent, or a data file that does not fit the model
            (:func:`workbench.perf.input_data.load_input_data`).
    """
    check_batch_size(info, options.batch_size)
    if options.input_data in ("random", "zero"):
        rng = np.random.default_rng(options.seed)
        return [[_synthetic(spec, info, options, rng) for spec in info.inputs]]
    entries = load_input_data(options.input_data, info, options.shapes)
    if info.max_batch_size == 0:
        return [[_tensor(info, name, array) for name, array in entry.items()] for entry in entries]
    return _batches(info, entries, options.batch_size)


def _batches(info: ModelInfo, entries: list[dict[str, np.ndarray]], batch: int) -> list[list[Tensor]]:
    count = len(entries) // math.gcd(len(entries), batch)
    requests = []
    for j in range(count):
        rows = [entries[(j * batch + k) % len(entries)] for k in range(batch)]
        if len({frozenset(r) for r in rows}) > 1:
            raise PerfError("an optional input is in some entries and not in others; "
                            "the entries of one batch need the same inputs")
        requests.append([_tensor(info, name, _stack(name, [r[name] for r in rows])) for name in rows[0]])
    return requests


def _stack(name: str, rows: Sequence[np.ndarray]) -> np.ndarray:
    if len({row.shape for row in rows}) > 1:
        raise PerfError(f"entries of input '{name}' have different shapes; a batch needs equal shapes")
    return np.stack(rows)


def _tensor(info: ModelInfo, name: str, array: np.ndarray) -> Tensor:
    spec = next(s for s in info.inputs if s.name == name)
    return Tensor(name, spec.datatype, array)


def _synthetic(spec: InputSpec, info: ModelInfo, options: PerfOptions, rng: np.random.Generator) -> Tensor:
    dims = resolve_dims(spec, options.shapes, element_count=None)
    shape = (options.batch_size, *dims) if info.max_batch_size > 0 else dims
    dtype = numpy_dtype(spec.datatype)
    if spec.datatype == "BYTES":
        data = _strings(shape, options, rng)
    elif options.input_data == "zero":
        data = np.zeros(shape, dtype)
    else:
        data = _random(shape, dtype, rng)
    return Tensor(spec.name, spec.datatype, data)


def _random(shape: tuple[int, ...], dtype: np.dtype, rng: np.random.Generator) -> np.ndarray:
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(np.bool_)
    if np.issubdtype(dtype, np.integer):
        return rng.integers(0, RANDOM_INT_HIGH, shape).astype(dtype)
    return rng.random(shape, dtype=np.float64).astype(dtype)


def _strings(shape: tuple[int, ...], options: PerfOptions, rng: np.random.Generator) -> np.ndarray:
    count = int(np.prod(shape, dtype=np.int64))
    if options.string_data is not None:
        values = [options.string_data.encode()] * count
    else:
        letters = _ALPHABET[rng.integers(0, len(_ALPHABET), (count, options.string_length))]
        values = [row.tobytes() for row in letters]
    data = np.empty(count, dtype=object)
    data[:] = values
    return data.reshape(shape)


def shape_overrides(items: Sequence[str]) -> Mapping[str, tuple[int, ...]]:
    """``["pixels:64", "ids:1,128"]`` -> ``{"pixels": (64,), "ids": (1, 128)}`` (``--shape``).

    Raises:
        PerfError: an item without ``NAME:`` or with a dim that is not a positive integer.
    """
    shapes = {}
    for item in items:
        name, sep, dims = item.rpartition(":")
        try:
            values = tuple(int(d) for d in dims.split(","))
        except ValueError:
            values = ()
        if not sep or not name or not values or min(values) < 1:
            raise PerfError(f"invalid --shape '{item}': expected NAME:d1[,d2...] with dims >= 1")
        shapes[name] = values
    return shapes
