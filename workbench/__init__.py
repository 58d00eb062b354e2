"""Model Serving Workbench: a Triton-compatible inference server.

The public surface: the engine (:class:`Server`, :class:`ServerOptions`), the
request/response types, tensor codecs shared by frontends, and the error tree.
Frontends, hosts and the UI import only these names.
"""

from workbench._version import __version__
from workbench.common.errors import (
    AlreadyExists,
    Cancelled,
    ConfigConflict,
    DecoupledNotSupported,
    InternalError,
    InvalidArgument,
    InvalidModelConfig,
    ModelLoadError,
    ModelNotFound,
    ModelNotReady,
    NotFound,
    ServerNotReady,
    StatusCode,
    Unavailable,
    UnknownError,
    Unsupported,
    WorkbenchError,
)
from workbench.config.model_config import model_config_to_json
from workbench.config.problems import ConfigProblem
from workbench.engine.api.server import Server
from workbench.messages.tensors import (
    tensor_from_buffer,
    tensor_from_list,
    tensor_from_shared_memory,
    tensor_to_buffer,
    tensor_to_list,
)
from workbench.messages.types import (
    CancelSignal,
    InferenceRequest,
    InferenceResponse,
    ModelReadyState,
    RequestedOutput,
    Tensor,
)
from workbench.startup.options import ServerOptions
from workbench.stats.statistics import ModelStatistics

__all__ = [
    "AlreadyExists",
    "CancelSignal",
    "Cancelled",
    "ConfigConflict",
    "ConfigProblem",
    "DecoupledNotSupported",
    "InferenceRequest",
    "InferenceResponse",
    "InternalError",
    "InvalidArgument",
    "InvalidModelConfig",
    "ModelLoadError",
    "ModelNotFound",
    "ModelNotReady",
    "ModelReadyState",
    "ModelStatistics",
    "NotFound",
    "RequestedOutput",
    "Server",
    "ServerNotReady",
    "ServerOptions",
    "StatusCode",
    "Tensor",
    "Unavailable",
    "UnknownError",
    "Unsupported",
    "WorkbenchError",
    "__version__",
    "model_config_to_json",
    "tensor_from_buffer",
    "tensor_from_list",
    "tensor_from_shared_memory",
    "tensor_to_buffer",
    "tensor_to_list",
]
