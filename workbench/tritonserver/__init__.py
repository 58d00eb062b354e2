"""Triton's in-process Python API (the ``tritonserver`` package) over the workbench's engine.

Code written against NVIDIA's ``tritonserver`` wheel runs here by changing its import::

    from workbench import tritonserver

    server = tritonserver.Server(model_repository="sample_models/repository",
                                 model_control_mode=tritonserver.ModelControlMode.EXPLICIT)
    server.start(wait_until_ready=True)
    model = server.load("digits_mlp")
    for response in model.infer(inputs={"pixels": pixels}):
        logits = numpy.from_dlpack(response.outputs["logits"])
    server.stop()

The names, arguments, defaults, return shapes and exception classes are Triton's (its
``python/tritonserver`` package in triton-inference-server/core). The engine runs on a thread
of its own (:mod:`workbench.tritonserver._loop`), so the blocking API works in a plain script
and in a Jupyter kernel alike, and ``model.async_infer`` serves asyncio code. What cannot apply
on this server (GPU memory types, custom metrics, model namespacing) raises
:class:`UnsupportedError`. docs/python-api.md lists what is supported.
"""

from workbench.tritonserver._enums import (
    DataType,
    DLDeviceType,
    InstanceGroupKind,
    LogFormat,
    MemoryType,
    MetricFormat,
    MetricKind,
    ModelBatchFlag,
    ModelControlMode,
    ModelTxnPropertyFlag,
    RateLimitMode,
)
from workbench.tritonserver._errors import (
    AlreadyExistsError,
    CancelledError,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    TritonError,
    UnavailableError,
    UnknownError,
    UnsupportedError,
)
from workbench.tritonserver._model import Model
from workbench.tritonserver._options import ModelLoadDeviceLimit, Options, RateLimiterResource
from workbench.tritonserver._request import InferenceRequest, RequestFlag
from workbench.tritonserver._response import AsyncResponseIterator, InferenceResponse, ResponseIterator
from workbench.tritonserver._server import Metric, MetricFamily, Server
from workbench.tritonserver._tensor import MemoryBuffer, Tensor

__all__ = [
    "AlreadyExistsError", "AsyncResponseIterator", "CancelledError", "DLDeviceType", "DataType",
    "InferenceRequest", "InferenceResponse", "InstanceGroupKind", "InternalError", "InvalidArgumentError",
    "LogFormat", "MemoryBuffer", "MemoryType", "Metric", "MetricFamily", "MetricFormat", "MetricKind", "Model",
    "ModelBatchFlag", "ModelControlMode", "ModelLoadDeviceLimit", "ModelTxnPropertyFlag", "NotFoundError",
    "Options", "RateLimitMode", "RateLimiterResource", "RequestFlag", "ResponseIterator", "Server", "Tensor",
    "TritonError", "UnavailableError", "UnknownError", "UnsupportedError",
]
