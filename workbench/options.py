"""Server options: one settings object, filled by the CLI, traitlets or the environment.

Field names mirror tritonserver's flags (``--model-repository`` ->
``model_repository``); environment variables use the ``WORKBENCH_`` prefix.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class ServerOptions(BaseSettings):
    """Everything `workbench serve` and the engine can be told."""

    model_config = SettingsConfigDict(env_prefix="WORKBENCH_", extra="forbid")

    model_repository: list[str] = Field(default_factory=list)
    """Model repository folders (tritonserver ``--model-repository``, repeatable)."""

    model_control_mode: Literal["none", "explicit", "poll"] = "none"
    """``none``: load everything at start, no load/unload API; ``explicit``: only
    ``load_model`` at start, then the repository API decides."""

    load_model: list[str] = Field(default_factory=list)
    """Models to load at start in explicit mode (``*`` = all)."""

    strict_model_config: bool = False
    """True = no auto-complete from model files (``--strict-model-config=true`` /
    ``--disable-auto-complete-config``)."""

    exit_on_error: bool = True
    """Exit at start-up if any model fails to load (tritonserver's default)."""

    strict_readiness: bool = True
    """``/v2/health/ready`` is 200 only when every model that should load is READY."""

    server_id: str = "workbench"
    """Server name reported by ``GET /v2`` (tritonserver ``--id``)."""

    http_address: str = "0.0.0.0"
    http_port: int = Field(default=8000, ge=0, le=65535)
    """HTTP port; 0 binds a free port (the bound port is logged and readable from the host)."""

    exit_timeout_secs: float = Field(default=30.0, ge=0)
    """Seconds to let in-flight requests finish on shutdown (SIGTERM/SIGINT)."""

    log_verbose: int = Field(default=0, ge=0)
    """Verbose logging level; > 0 logs every request."""

    default_max_batch_size: int = Field(default=4, ge=0)
    """max_batch_size given to batchable ONNX models whose config has none
    (``--backend-config=onnxruntime,default-max-batch-size=N``)."""

    model_load_thread_count: int = Field(default=4, ge=1)
    """Threads that load models in parallel (tritonserver ``--model-load-thread-count``)."""

    http_max_input_size: int = Field(default=64 * 1024 * 1024, gt=0)
    """Largest accepted HTTP request body, bytes (tritonserver ``--http-max-input-size``)."""


__all__ = ["ServerOptions"]
