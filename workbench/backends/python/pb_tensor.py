"""Tensors, errors and datatype helpers of ``triton_python_backend_utils`` (re-exported by
:mod:`.pb_utils`; Triton's ``pb_utils.Tensor``, ``TritonError``, ``TritonModelException``,
``triton_string_to_numpy`` & co).

Runs inside the stub process: numpy, ml_dtypes and the standard library; torch for BF16
DLPack only (numpy has no BF16 DLPack, Triton's stub has its own).
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from workbench.common.bytes_codec import decode_bytes, encode_bytes

TRITON_STRING_TO_NUMPY = {
    "TYPE_BOOL": bool,
    "TYPE_UINT8": np.uint8,
    "TYPE_UINT16": np.uint16,
    "TYPE_UINT32": np.uint32,
    "TYPE_UINT64": np.uint64,
    "TYPE_INT8": np.int8,
    "TYPE_INT16": np.int16,
    "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64,
    "TYPE_FP16": np.float16,
    "TYPE_FP32": np.float32,
    "TYPE_FP64": np.float64,
    "TYPE_STRING": np.object_,
}
#: ``inference.DataType`` numbers (TYPE_BOOL = 1 ... TYPE_STRING = 13) -> numpy types
_CODE_TO_NUMPY = {
    1: np.bool_, 2: np.uint8, 3: np.uint16, 4: np.uint32, 5: np.uint64, 6: np.int8,
    7: np.int16, 8: np.int32, 9: np.int64, 10: np.float16, 11: np.float32, 12: np.float64,
    13: np.object_, 14: ml_dtypes.bfloat16,
}
_NUMPY_TO_CODE = {np.dtype(t): code for code, t in _CODE_TO_NUMPY.items()}
_BF16 = np.dtype(ml_dtypes.bfloat16)
#: Triton's text (``PbTensor::AsNumpy``)
_BF16_AS_NUMPY = "Tensor dtype is BF16 and cannot be converted to NumPy. Use to_dlpack() and from_dlpack() instead."


# ---------------------------------------------------------------------------- errors
class TritonError:
    """An error carried by an :class:`InferenceResponse` (not raised; Triton's ``TritonError``).

    Args:
        message: the text the client receives.
        code: one of the class constants (Triton's ``TRITONSERVER_Error_Code``); the
            client sees the matching status (INVALID_ARG -> HTTP 400, ...).
    """

    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7

    def __init__(self, message: str, code: int = INTERNAL) -> None:
        self._message = str(message)
        self._code = int(code)

    def message(self) -> str:
        return self._message

    def code(self) -> int:
        return self._code

    def __str__(self) -> str:
        return self._message

    def __repr__(self) -> str:
        return f"TritonError({self._message!r}, code={self._code})"


class TritonModelException(Exception):
    """Raised by pb_utils calls that fail (bad tensors, BLS misuse); models may raise it too."""

    def __init__(self, message: str = "") -> None:
        super().__init__(message)
        self._message = str(message)

    def message(self) -> str:
        return self._message


# ---------------------------------------------------------------------------- tensors
class Tensor:
    """A named CPU tensor (Triton's ``pb_utils.Tensor``).

    Args:
        name: tensor name as in the model config.
        data: a numpy array (or anything ``np.asarray`` takes). BYTES tensors are numpy
            ``object`` arrays of ``bytes`` (``str`` elements are sent as UTF-8); numpy
            ``str_`` arrays are refused, as in Triton.

    Raises:
        TypeError: ``name`` is not a ``str`` or ``data`` is None (pybind11's conversion
            errors in Triton).
        TritonModelException: a numpy ``str_`` / ``void`` array, or a dtype with no Triton type.
    """

    def __init__(self, name: str, data: Any) -> None:
        if isinstance(name, bytes):  # pybind11 converts bytes to std::string too
            name = name.decode("utf-8", "replace")
        if not isinstance(name, str) or data is None:
            argument, value = ("name", name) if not isinstance(name, str) else ("data", data)
            raise TypeError(f"__init__(): incompatible constructor arguments: '{argument}' must be "
                            f"{'str' if argument == 'name' else 'a numpy array'}, got {type(value).__name__}")
        array = data if isinstance(data, np.ndarray) else np.asarray(data)
        if array.dtype.kind in ("U", "V"):
            raise TritonModelException(
                "Tensor dtype used for numpy_array is not supported by Python backend. "
                "Please use np.object_ instead."
            )
        if array.dtype.kind == "S":
            array = array.astype(np.object_)
        if array.dtype not in _NUMPY_TO_CODE:
            raise TritonModelException(f"numpy dtype {array.dtype} of tensor '{name}' has no Triton type")
        self._name = name
        self._array = array

    @classmethod
    def _wrap(cls, name: str, array: np.ndarray) -> Tensor:
        """A tensor over a decoded array, without the constructor's checks (stub use)."""
        tensor = cls.__new__(cls)
        tensor._name, tensor._array = name, array
        return tensor

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        """The data as a numpy array (no copy; BYTES -> object array of ``bytes``).

        Raises:
            TritonModelException: a BF16 tensor (Triton's text: numpy has no BF16; use
                :meth:`to_dlpack`).
        """
        if self._array.dtype == _BF16:
            raise TritonModelException(_BF16_AS_NUMPY)
        return self._array

    def shape(self) -> list[int]:
        return list(self._array.shape)

    def triton_dtype(self) -> int:
        """The ``inference.DataType`` number (TYPE_FP32 = 11, TYPE_STRING = 13, ...)."""
        return _NUMPY_TO_CODE[self._array.dtype]

    def is_cpu(self) -> bool:
        """Always True: tensors live in CPU memory here."""
        return True

    def to_dlpack(self) -> Any:
        """A DLPack capsule over the data (CPU; not for BYTES tensors). A BF16 tensor's
        capsule (DLPack's bfloat16) is made by torch, which must be importable then.

        Raises:
            TritonModelException: a BYTES tensor; a BF16 one without torch.
        """
        if self._array.dtype == np.object_:
            raise TritonModelException("DLPack does not support BYTES tensors")
        if self._array.dtype == _BF16:
            torch = _torch()
            data = torch.from_numpy(self._array.view(np.int16)).view(torch.bfloat16)
            return torch.utils.dlpack.to_dlpack(data)
        return self._array.__dlpack__()

    def __dlpack__(self, stream: Any = None) -> Any:
        return self.to_dlpack()

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)  # kDLCPU, device 0

    @staticmethod
    def from_dlpack(name: str, capsule: Any) -> Tensor:
        """A tensor over a DLPack capsule or an object with ``__dlpack__`` (torch, cupy...).

        Raises:
            TritonModelException: the data is not in CPU memory or cannot be read.
        """
        source = capsule if hasattr(capsule, "__dlpack__") else _Capsule(capsule)
        try:
            array = np.from_dlpack(source)
        except (BufferError, RuntimeError, TypeError, ValueError) as exc:
            bf16 = _bf16_from_dlpack(source)  # numpy reads no DLPack bfloat16: torch does
            if bf16 is None:
                raise TritonModelException(f"unable to read DLPack tensor '{name}': {exc}") from None
            return Tensor._wrap(name, bf16)
        return Tensor(name, array)

    def __repr__(self) -> str:
        return f"Tensor({self._name!r}, shape={list(self._array.shape)}, dtype={self._array.dtype})"


def tensor_data(tensor: Tensor) -> np.ndarray:
    """``tensor``'s array whatever its datatype (what the stub sends; :meth:`Tensor.as_numpy`
    refuses BF16 to models, as Triton's)."""
    return tensor._array


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        raise TritonModelException("BF16 tensors go through DLPack with torch here: install torch "
                                   "in the model's environment") from None
    return torch


def _bf16_from_dlpack(source: Any) -> np.ndarray | None:
    """The data of a DLPack bfloat16 tensor as a numpy bfloat16 array sharing its memory
    (read by torch; None when torch is absent or the tensor is not a CPU bfloat16 one)."""
    try:
        import torch

        data = torch.utils.dlpack.from_dlpack(source)
    except Exception:  # noqa: BLE001  # not readable by torch either: the caller reports numpy's error
        return None
    if data.dtype != torch.bfloat16 or data.device.type != "cpu":
        return None
    return data.view(torch.int16).numpy().view(_BF16)


class _Capsule:
    """Lets ``np.from_dlpack`` read a bare DLPack capsule (it wants ``__dlpack__``)."""

    def __init__(self, capsule: Any) -> None:
        self._capsule = capsule

    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any:
        return self._capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)


# ---------------------------------------------------------------------------- datatypes
def triton_string_to_numpy(triton_type_string: str) -> Any:
    """``"TYPE_FP32"`` -> ``np.float32`` (``TYPE_STRING`` -> ``np.object_``).

    Raises:
        KeyError: an unknown type name.
    """
    return TRITON_STRING_TO_NUMPY[triton_type_string]


def triton_to_numpy_type(data_type: int) -> Any:
    """``inference.DataType`` number -> numpy type (None when unknown)."""
    return _CODE_TO_NUMPY.get(int(data_type))


def numpy_to_triton_type(data_type: Any) -> int | None:
    """numpy dtype or type -> ``inference.DataType`` number (None when unknown)."""
    try:
        dtype = np.dtype(data_type)
    except TypeError:
        return None
    if dtype.kind == "S":
        return 13
    return _NUMPY_TO_CODE.get(dtype)


def serialize_byte_tensor(input_tensor: np.ndarray) -> np.ndarray:
    """Triton's BYTES encoding (4-byte little-endian length + bytes per element, C order),
    as a 0-d numpy object array holding the encoded ``bytes`` (empty 1-D array for size 0)."""
    if input_tensor.size == 0:
        return np.empty([0], dtype=np.object_)
    return np.asarray(encode_bytes(np.asarray(input_tensor)), dtype=np.object_)


def deserialize_bytes_tensor(encoded_tensor: Any) -> np.ndarray:
    """Triton's BYTES encoding -> 1-D numpy object array of ``bytes``."""
    if isinstance(encoded_tensor, np.ndarray) and encoded_tensor.dtype == np.object_:
        encoded_tensor = encoded_tensor.item()
    return decode_bytes(encoded_tensor)


__all__ = [
    "TRITON_STRING_TO_NUMPY",
    "Tensor",
    "TritonError",
    "TritonModelException",
    "deserialize_bytes_tensor",
    "numpy_to_triton_type",
    "serialize_byte_tensor",
    "triton_string_to_numpy",
    "triton_to_numpy_type",
]
