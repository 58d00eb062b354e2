"""Triton's ``Tensor`` and ``MemoryBuffer`` over host memory (numpy arrays).

A tensor holds its data in a host buffer as Triton does (BYTES serialized as Triton's 4-byte
length-prefixed elements); it is a DLPack producer (``numpy.from_dlpack(tensor)``,
``torch.from_dlpack``), converts with ``numpy.asarray``, and ``to_bytes_array`` /
``to_string_array`` decode BYTES. GPU memory does not apply: asking for it raises
:class:`~workbench.tritonserver.UnsupportedError`.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from workbench import InvalidArgument
from workbench.common.datatypes import numpy_dtype, wire_name
from workbench.tritonserver._enums import DataType, DLDeviceType, MemoryType
from workbench.tritonserver._errors import InvalidArgumentError, UnsupportedError

#: what a memory type / device may be given as (Triton's ``DeviceOrMemoryType``)
DeviceOrMemoryType = str | MemoryType | DLDeviceType | tuple[MemoryType | DLDeviceType, int]


def host_memory_type(device: DeviceOrMemoryType) -> MemoryType:
    """``device`` as a host memory type (``"cpu"``, ``"cpu_pinned"``, ``MemoryType.CPU``,
    ``(DLDeviceType.kDLCPU, 0)``, ...).

    Raises:
        UnsupportedError: a GPU (``"gpu"``, ``"gpu:0"``, ``MemoryType.GPU``, CUDA): this
            server has host memory only.
        InvalidArgumentError: not a memory type.
    """
    kind: Any = device[0] if isinstance(device, tuple) else device
    if isinstance(kind, str):
        name = kind.split(":")[0].strip().upper()
        kind = {"CPU": MemoryType.CPU, "CPU_PINNED": MemoryType.CPU_PINNED, "GPU": MemoryType.GPU,
                "CUDA": MemoryType.GPU}.get(name, kind)
    if isinstance(kind, DLDeviceType):
        kind = {DLDeviceType.kDLCPU: MemoryType.CPU, DLDeviceType.kDLCUDAHost: MemoryType.CPU_PINNED,
                DLDeviceType.kDLCUDA: MemoryType.GPU}[kind]
    if not isinstance(kind, MemoryType):
        raise InvalidArgumentError(f"Invalid memory type: {device!r}")
    if kind == MemoryType.GPU:
        raise UnsupportedError(f"Memory type {device!r} not supported: the workbench serves host memory only "
                               "(no GPU memory types)")
    return kind


@dataclass(slots=True)
class MemoryBuffer:
    """A host buffer (Triton's ``MemoryBuffer``): address, type, size in bytes, and the
    object keeping it alive."""

    data_ptr: int
    memory_type: MemoryType
    memory_type_id: int
    size: int
    owner: Any

    @staticmethod
    def from_dlpack(owner: Any) -> MemoryBuffer:
        """The buffer of a host DLPack producer (a numpy array, a CPU torch tensor).

        Raises:
            InvalidArgumentError: ``owner`` does not support DLPack.
            UnsupportedError: it lives in GPU memory.
        """
        return _buffer_of(_host_array(owner))


def _buffer_of(array: np.ndarray) -> MemoryBuffer:
    return MemoryBuffer(array.ctypes.data, MemoryType.CPU, 0, array.nbytes, array)


def _host_array(obj: Any) -> np.ndarray:
    """A C-contiguous, writable numpy view or copy of a DLPack producer on the host."""
    if not hasattr(obj, "__dlpack__"):
        raise InvalidArgumentError("Object does not support DLpack protocol")
    device = obj.__dlpack_device__() if hasattr(obj, "__dlpack_device__") else (DLDeviceType.kDLCPU, 0)
    if int(device[0]) not in (DLDeviceType.kDLCPU, DLDeviceType.kDLCUDAHost):
        raise UnsupportedError(f"Tensors on device {tuple(device)} are not supported: the workbench serves "
                               "host memory only")
    return _contiguous(np.from_dlpack(obj))


def _contiguous(array: np.ndarray) -> np.ndarray:
    if array.flags.c_contiguous and array.flags.writeable:
        return array
    return np.array(array, order="C", copy=True)


def _serialize(array: np.ndarray) -> np.ndarray:
    """A BYTES array (bytes, str or anything ``str()`` writes) -> Triton's serialized form
    (4-byte little-endian length, then the bytes, per element) as a uint8 array."""
    parts: list[bytes] = []
    for item in array.reshape(-1).tolist():
        data = item if isinstance(item, bytes) else str(item).encode("utf-8")
        parts.append(struct.pack("<I", len(data)))
        parts.append(data)
    return np.frombuffer(b"".join(parts), dtype=np.uint8).copy()


def _deserialize(buffer: np.ndarray, count: int) -> np.ndarray:
    view = buffer.reshape(-1).view(np.uint8).tobytes()
    items: list[bytes] = []
    offset = 0
    while offset < len(view) and len(items) < count:
        (length,) = struct.unpack_from("<I", view, offset)
        offset += 4
        items.append(bytes(view[offset:offset + length]))
        offset += length
    result = np.empty(len(items), dtype=object)
    result[:] = items
    return result


@dataclass(slots=True)
class Tensor:
    """A tensor in host memory (Triton's ``Tensor``): ``data_type``, ``shape`` and its
    ``memory_buffer`` (BYTES: serialized)."""

    data_type: DataType
    shape: Sequence[int]
    memory_buffer: MemoryBuffer

    @property
    def data_ptr(self) -> int:
        return self.memory_buffer.data_ptr

    @property
    def memory_type(self) -> MemoryType:
        return self.memory_buffer.memory_type

    @property
    def memory_type_id(self) -> int:
        return self.memory_buffer.memory_type_id

    @property
    def size(self) -> int:
        """The buffer's size in bytes."""
        return self.memory_buffer.size

    # ----------------------------------------------------------------- out
    def __dlpack__(self, *, stream: Any = None, **kwargs: Any) -> Any:
        """DLPack capsule of the data (no copy). ``stream`` must be None (host memory).

        Raises:
            InvalidArgumentError: a BYTES tensor (DLPack has no string type: use
                :meth:`to_bytes_array`).
        """
        if self.data_type == DataType.BYTES:
            raise InvalidArgumentError("DLPack does not support the BYTES data type: use to_bytes_array() "
                                       "or to_string_array()")
        return self._array().__dlpack__(stream=stream, **kwargs)

    def __dlpack_device__(self) -> tuple[DLDeviceType, int]:
        return DLDeviceType.kDLCPU, 0

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        """``numpy.asarray(tensor)``: the data (BYTES: an object array of bytes)."""
        array = self.to_bytes_array() if self.data_type == DataType.BYTES else self._array()
        if dtype is not None:
            array = array.astype(dtype, copy=False)
        return array.copy() if copy else array

    def _array(self) -> np.ndarray:
        owner = self.memory_buffer.owner
        dtype = numpy_dtype(self.data_type.wire)
        return owner.reshape(-1).view(np.uint8).view(dtype).reshape(tuple(self.shape))

    def to_bytes_array(self) -> np.ndarray:
        """A BYTES tensor as a numpy object array of ``bytes``, in its shape.

        Raises:
            InvalidArgumentError: not a BYTES tensor (Triton's text).
        """
        if self.data_type != DataType.BYTES:
            raise InvalidArgumentError(f"Tensor has data type {self.data_type} not {DataType.BYTES}")
        count = int(np.prod(self.shape)) if len(self.shape) else 1
        return _deserialize(self.memory_buffer.owner, count).reshape(tuple(self.shape))

    def to_string_array(self) -> np.ndarray:
        """A BYTES tensor decoded as UTF-8 strings (numpy ``str_``; Triton's ``astype(str)``
        decodes ASCII only and fails on other text).

        Raises:
            UnicodeDecodeError: an element is not UTF-8."""
        items = self.to_bytes_array()
        return np.array([item.decode("utf-8") for item in items.reshape(-1)], dtype=str).reshape(items.shape)

    def to_host(self) -> Tensor:
        """This tensor (it is in host memory already)."""
        return self

    def to_device(self, device: DeviceOrMemoryType) -> Tensor:
        """This tensor for a host device; a GPU raises :class:`UnsupportedError`."""
        host_memory_type(device)
        return self

    # ----------------------------------------------------------------- in
    @staticmethod
    def from_dlpack(obj: Any) -> Tensor:
        """A tensor over a host DLPack producer's memory (no copy when C-contiguous)."""
        array = _host_array(obj)
        return Tensor(_data_type(array), array.shape, _buffer_of(array))

    @staticmethod
    def from_bytes_array(bytes_array: Sequence[Any] | np.ndarray) -> Tensor:
        """A BYTES tensor from ``bytes`` / ``str`` elements (a list or numpy array).

        Raises:
            InvalidArgumentError: the elements are not strings or bytes (Triton's text).
        """
        result = Tensor.from_object(bytes_array)
        if result.data_type != DataType.BYTES:
            raise InvalidArgumentError(f"Unsupported conversion from {bytes_array} to Triton BYTES Tensor. "
                                       f"Got {result.data_type}")
        return result

    from_string_array = from_bytes_array

    @staticmethod
    def from_object(obj: Any) -> Tensor:
        """A tensor from a :class:`Tensor`, numpy array or scalar, a (nested) list, or a host
        DLPack producer.

        Raises:
            InvalidArgumentError: anything else, or a dtype with no Triton type.
        """
        if isinstance(obj, Tensor):
            return obj
        if isinstance(obj, (np.ndarray, np.generic)):
            return Tensor.from_numpy(np.asarray(obj))
        if isinstance(obj, (list, tuple)):
            try:
                array = np.array(obj)
            except ValueError as exc:
                raise InvalidArgumentError(f"Conversion from {obj} to tensor not supported.") from exc
            return Tensor.from_numpy(array)
        if hasattr(obj, "__dlpack__"):
            return Tensor.from_dlpack(obj)
        raise InvalidArgumentError(f"Input type {type(obj)} not supported. Must be one of "
                                   "[list, numpy.ndarray, Tensor] or the type must support __dlpack__")

    @staticmethod
    def from_numpy(array: np.ndarray) -> Tensor:
        data_type = _data_type(array)
        if data_type == DataType.BYTES:
            return Tensor(data_type, array.shape, _buffer_of(_serialize(array)))
        array = _contiguous(array)
        return Tensor(data_type, array.shape, _buffer_of(array))

    def engine_data(self) -> np.ndarray:
        """The data as the engine takes it: a numpy array (BYTES: object array of bytes)."""
        return self.to_bytes_array() if self.data_type == DataType.BYTES else self._array()


def _data_type(array: np.ndarray) -> DataType:
    try:
        return DataType[wire_name(array)]
    except InvalidArgument as exc:
        raise InvalidArgumentError(str(exc)) from None


def tensor_from_engine(datatype: str, data: np.ndarray) -> Tensor:
    """An engine output (v2 datatype name, numpy data) as a :class:`Tensor` (no copy for
    contiguous numeric data)."""
    data_type = DataType.from_wire(datatype)
    if data_type == DataType.BYTES:
        return Tensor(data_type, data.shape, _buffer_of(_serialize(data)))
    array = _contiguous(np.asarray(data))
    return Tensor(data_type, array.shape, _buffer_of(array))


__all__ = ["DeviceOrMemoryType", "MemoryBuffer", "Tensor", "host_memory_type", "tensor_from_engine"]
