"""Triton's ``Options`` (the fields of ``tritonserver.Server(...)``) and their translation into
the engine's :class:`workbench.ServerOptions`.

Every field of Triton's ``Options`` is accepted with Triton's default. Those that apply map to
the engine's option of the same ``tritonserver`` flag; those about GPUs, shared libraries and
the container's folders (``pinned_memory_pool_size``, ``cache_directory``,
``backend_directory``, ``repo_agent_directory``, ``min_supported_compute_capability``,
``buffer_manager_thread_count``, ``enable_peer_access``, ``host_policies``) have nothing to
act on here and are ignored at any value; the few whose non-default value would change
behaviour the workbench does not have raise ``UnsupportedError`` at ``start()``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from workbench import ServerOptions
from workbench.tritonserver._enums import InstanceGroupKind, LogFormat, ModelControlMode, RateLimitMode
from workbench.tritonserver._errors import InvalidArgumentError, UnsupportedError


@dataclass(slots=True)
class RateLimiterResource:
    """A rate-limiter resource: ``name``, ``count`` available, on ``device``."""

    name: str
    count: int
    device: int


@dataclass(slots=True)
class ModelLoadDeviceLimit:
    """A device memory limit for loading models (GPU only: unsupported here)."""

    kind: InstanceGroupKind
    device: int
    fraction: float


@dataclass(slots=True)
class Options:
    """Server options, Triton's fields and defaults (see the module docstring for what maps
    where). ``exit_timeout`` is in seconds, ``metrics_interval`` in milliseconds."""

    model_repository: str | list[str] = field(default_factory=list)
    server_id: str = "triton"
    model_control_mode: ModelControlMode = ModelControlMode.NONE
    startup_models: list[str] = field(default_factory=list)
    strict_model_config: bool = False
    rate_limiter_mode: RateLimitMode = RateLimitMode.OFF
    rate_limiter_resources: list[RateLimiterResource] = field(default_factory=list)
    pinned_memory_pool_size: int = 1 << 28
    cuda_memory_pool_sizes: dict[int, int] = field(default_factory=dict)
    cache_config: dict[str, dict[str, Any]] = field(default_factory=dict)
    cache_directory: str = "/opt/tritonserver/caches"
    min_supported_compute_capability: float = 6.0
    exit_on_error: bool = True
    strict_readiness: bool = True
    exit_timeout: int = 30
    buffer_manager_thread_count: int = 0
    model_load_thread_count: int = 4
    model_load_retry_count: int = 0
    model_namespacing: bool = False
    enable_peer_access: bool = True
    log_file: str | None = None
    log_info: bool = False
    log_warn: bool = False
    log_error: bool = False
    log_format: LogFormat = LogFormat.DEFAULT
    log_verbose: int = 0
    metrics: bool = True
    gpu_metrics: bool = True
    cpu_metrics: bool = True
    metrics_interval: int = 2000
    backend_directory: str = "/opt/tritonserver/backends"
    repo_agent_directory: str = "/opt/tritonserver/repoagents"
    model_load_device_limits: list[ModelLoadDeviceLimit] = field(default_factory=list)
    backend_configuration: dict[str, dict[str, str]] = field(default_factory=dict)
    host_policies: dict[str, dict[str, str]] = field(default_factory=dict)
    metrics_configuration: dict[str, dict[str, str]] = field(default_factory=dict)

    def server_options(self) -> ServerOptions:
        """The engine's options for these.

        Raises:
            InvalidArgumentError: no model repository ("Model repository must be specified."),
                or a value the engine refuses (its text).
            UnsupportedError: ``cuda_memory_pool_sizes``, ``model_load_device_limits``,
                ``model_namespacing`` or ``cache_config`` other than the response cache's
                ``local`` ``size``: features this server does not have.
        """
        repositories = [self.model_repository] if isinstance(self.model_repository, str) \
            else list(self.model_repository)
        if not repositories:
            raise InvalidArgumentError("Model repository must be specified.")
        for name, value in (("cuda_memory_pool_sizes", self.cuda_memory_pool_sizes),
                            ("model_load_device_limits", self.model_load_device_limits),
                            ("model_namespacing", self.model_namespacing)):
            if value:
                raise UnsupportedError(f"{name} is not supported: the workbench serves CPU models in one "
                                       "namespace")
        info = self.log_info or self.log_verbose > 0
        warn = self.log_warn or info
        fields: dict[str, Any] = dict(
            model_repository=repositories,
            server_id=self.server_id,
            model_control_mode={ModelControlMode.NONE: "none", ModelControlMode.POLL: "poll",
                                ModelControlMode.EXPLICIT: "explicit"}[ModelControlMode(self.model_control_mode)],
            load_model=list(self.startup_models),
            strict_model_config=self.strict_model_config,
            rate_limit="execution_count" if self.rate_limiter_mode == RateLimitMode.EXEC_COUNT else "off",
            rate_limit_resource=[f"{r.name}:{r.count}:{r.device}" for r in self.rate_limiter_resources],
            response_cache_byte_size=self._cache_bytes(),
            exit_on_error=self.exit_on_error,
            strict_readiness=self.strict_readiness,
            exit_timeout_secs=self.exit_timeout,
            model_load_thread_count=self.model_load_thread_count,
            model_load_retry_count=self.model_load_retry_count,
            log_file=self.log_file or "",
            log_info=info,
            log_warning=warn,
            log_error=self.log_error or warn,
            log_format="ISO8601" if self.log_format == LogFormat.ISO8601 else "default",
            log_verbose=self.log_verbose,
            allow_metrics=self.metrics,
            allow_gpu_metrics=self.gpu_metrics,
            allow_cpu_metrics=self.cpu_metrics,
            metrics_interval_ms=self.metrics_interval,
            metrics_config={key: value for settings in self.metrics_configuration.values()
                            for key, value in settings.items()},
        )
        max_batch = [value for settings in self.backend_configuration.values()
                     for key, value in settings.items() if key == "default-max-batch-size"]
        if max_batch:
            fields["default_max_batch_size"] = int(max_batch[-1])
        try:
            return ServerOptions(**fields)
        except ValidationError as exc:
            raise InvalidArgumentError(str(exc)) from None

    def _cache_bytes(self) -> int:
        if not self.cache_config:
            return 0
        local = self.cache_config.get("local", {})
        if set(self.cache_config) != {"local"} or set(local) - {"size"}:
            raise UnsupportedError("cache_config: only the 'local' cache's 'size' (bytes) is supported")
        return int(local.get("size", 0))


__all__ = ["ModelLoadDeviceLimit", "Options", "RateLimiterResource"]
