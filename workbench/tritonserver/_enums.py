"""The enums of Triton's ``tritonserver`` package, with the values of Triton's C API
(``TRITONSERVER_DataType``, ``TRITONSERVER_MemoryType``, ``TRITONSERVER_ModelControlMode``, ...),
so code that compares, prints or stores them sees the same numbers."""

from __future__ import annotations

import enum


class DataType(enum.IntEnum):
    """A tensor's element type (``TRITONSERVER_DataType``); :attr:`wire` is its v2 name."""

    INVALID = 0
    BOOL = 1
    UINT8 = 2
    UINT16 = 3
    UINT32 = 4
    UINT64 = 5
    INT8 = 6
    INT16 = 7
    INT32 = 8
    INT64 = 9
    FP16 = 10
    FP32 = 11
    FP64 = 12
    BYTES = 13
    BF16 = 14

    @property
    def wire(self) -> str:
        """The KServe v2 name (``"FP32"``, ``"BYTES"``, ...)."""
        return self.name

    @classmethod
    def from_wire(cls, name: str) -> DataType:
        """The member for a v2 name; :attr:`INVALID` for an unknown one."""
        return cls.__members__.get(name, cls.INVALID)


class MemoryType(enum.IntEnum):
    """Where a buffer lives (``TRITONSERVER_MemoryType``). The workbench serves host memory
    only: ``GPU`` is refused with :class:`~workbench.tritonserver.UnsupportedError`."""

    CPU = 0
    CPU_PINNED = 1
    GPU = 2


class DLDeviceType(enum.IntEnum):
    """DLPack's device types (``DLDeviceType``): tensors here are ``kDLCPU``."""

    kDLCPU = 1
    kDLCUDA = 2
    kDLCUDAHost = 3


class ModelControlMode(enum.IntEnum):
    """``--model-control-mode`` (``TRITONSERVER_ModelControlMode``)."""

    NONE = 0
    POLL = 1
    EXPLICIT = 2


class RateLimitMode(enum.IntEnum):
    """``--rate-limit`` (``TRITONSERVER_RateLimitMode``)."""

    OFF = 0
    EXEC_COUNT = 1


class LogFormat(enum.IntEnum):
    """``--log-format`` (``TRITONSERVER_LogFormat``)."""

    DEFAULT = 0
    ISO8601 = 1


class InstanceGroupKind(enum.IntEnum):
    """An instance group's kind (``TRITONSERVER_InstanceGroupKind``)."""

    AUTO = 0
    CPU = 1
    GPU = 2
    MODEL = 3


class MetricFormat(enum.IntEnum):
    """The format of :meth:`Server.metrics` (``TRITONSERVER_MetricFormat``)."""

    PROMETHEUS = 0


class MetricKind(enum.IntEnum):
    """A custom metric family's kind (``TRITONSERVER_MetricKind``)."""

    COUNTER = 0
    GAUGE = 1
    HISTOGRAM = 2


class ModelBatchFlag(enum.IntEnum):
    """A model's batch properties (``TRITONSERVER_ModelBatchFlag``)."""

    UNKNOWN = 1
    FIRST_DIM = 2


class ModelTxnPropertyFlag(enum.IntEnum):
    """A model's transaction policy (``TRITONSERVER_ModelTxnPropertyFlag``)."""

    ONE_TO_ONE = 1
    DECOUPLED = 2


__all__ = ["DLDeviceType", "DataType", "InstanceGroupKind", "LogFormat", "MemoryType", "MetricFormat",
           "MetricKind", "ModelBatchFlag", "ModelControlMode", "ModelTxnPropertyFlag", "RateLimitMode"]
