"""The typed results of the engine's public methods: Triton's JSON shapes as ``TypedDict``s.

Each is the plain ``dict`` the frontends serialise (HTTP writes it as JSON, gRPC parses it
into the protobuf message of the same field names), so the wire stays Triton's, byte for
byte; the types only tell readers and mypy which keys there are. Field names follow the
KServe v2 protocol (``required_api.md``) and Triton's extensions (``extension_statistics.md``,
``extension_model_repository.md``, ``extension_shared_memory.md``, ``extension_logging.md``,
``extension_trace.md``); ``NotRequired`` marks keys that are sometimes absent.

Units: statistic durations are cumulative **nanoseconds**; ``last_inference`` is
**milliseconds** since the epoch; sizes are bytes.
"""

from __future__ import annotations

import sys
from typing import TypedDict

if sys.version_info >= (3, 11):
    from typing import NotRequired
else:  # Python 3.10: typing_extensions comes with fastapi and pydantic
    from typing_extensions import NotRequired


# ----------------------------------------------------------------- metadata (KServe v2)
class ServerMetadata(TypedDict):
    """``GET /v2`` (gRPC ``ServerMetadataResponse``)."""

    name: str
    """The server's id (``--id``, Triton's default ``"triton"``)."""
    version: str
    """The server's version string."""
    extensions: list[str]
    """The protocol extensions it implements (``"statistics"``, ``"trace"``, ...)."""


class TensorMetadata(TypedDict):
    """One input or output of :class:`ModelMetadata`."""

    name: str
    datatype: str
    """The v2 wire datatype (``"FP32"``, ``"BYTES"``, ...)."""
    shape: list[int]
    """Dims as clients see them: -1 = variable; a leading -1 batch dim when the model batches."""


class ModelMetadata(TypedDict):
    """``GET /v2/models/<m>[/versions/<v>]`` (gRPC ``ModelMetadataResponse``)."""

    name: str
    versions: list[str]
    """The READY versions (only the asked one when a version is given)."""
    platform: str
    """The config's ``platform``, or its ``backend`` when there is no platform."""
    inputs: list[TensorMetadata]
    outputs: list[TensorMetadata]


# ----------------------------------------------------------------- statistics extension
class StatisticDuration(TypedDict):
    """A count and its cumulative duration (Triton's ``StatisticDuration``)."""

    count: int
    ns: int
    """Cumulative nanoseconds over ``count``."""


class InferStats(TypedDict):
    """``inference_stats`` of :class:`ModelStats` (Triton's ``InferStatistics``): per
    request, durations in nanoseconds."""

    success: StatisticDuration
    """Successful requests, end to end (arrival to response)."""
    fail: StatisticDuration
    """Failed requests."""
    queue: StatisticDuration
    """Time waiting in the scheduler's queue."""
    compute_input: StatisticDuration
    """Time preparing the inputs for the backend."""
    compute_infer: StatisticDuration
    """Time executing the model."""
    compute_output: StatisticDuration
    """Time extracting the outputs."""
    cache_hit: StatisticDuration
    """Requests answered from the response cache (the lookup time)."""
    cache_miss: StatisticDuration
    """Requests the cache did not hold (lookup and insert time)."""


class BatchStats(TypedDict):
    """One row of ``batch_stats`` (Triton's ``InferBatchStatistics``): per executed batch
    of ``batch_size``, durations in nanoseconds."""

    batch_size: int
    compute_input: StatisticDuration
    compute_infer: StatisticDuration
    compute_output: StatisticDuration


class MemoryUsage(TypedDict):
    """One row of ``memory_usage`` (Triton's ``MemoryUsage``)."""

    type: str
    """``"CPU"``, ``"CPU_PINNED"`` or ``"GPU"``."""
    id: int
    """The device id."""
    byte_size: int


class ModelStats(TypedDict):
    """One model version's statistics (Triton's ``ModelStatistics``)."""

    name: str
    version: str
    last_inference: int
    """Milliseconds since the epoch of the last request (0: none yet)."""
    inference_count: int
    """Inferences performed (a batch of 4 counts 4)."""
    execution_count: int
    """Model executions (a batch of 4 counts 1)."""
    inference_stats: InferStats
    response_stats: dict[str, object]
    """Per-response statistics of decoupled models (Triton's ``InferResponseStatistics`` by
    response index); always empty here."""
    batch_stats: list[BatchStats]
    """By batch size, ascending."""
    memory_usage: list[MemoryUsage]


class ModelStatisticsReport(TypedDict):
    """``GET /v2/models[/<m>[/versions/<v>]]/stats`` (gRPC ``ModelStatisticsResponse``)."""

    model_stats: list[ModelStats]


# ----------------------------------------------------------------- model repository extension
class RepositoryIndexRow(TypedDict):
    """One row of ``POST /v2/repository/index`` (gRPC ``RepositoryIndexResponse.ModelIndex``):
    a model version, or a model without versions (only ``name``: never loaded; ``state``
    without ``version``: loading, or unavailable)."""

    name: str
    version: NotRequired[str]
    state: NotRequired[str]
    """``"READY"``, ``"LOADING"``, ``"UNLOADING"`` or ``"UNAVAILABLE"``."""
    reason: NotRequired[str]
    """Why the version is not ready (a load error, ``"unloaded"``); absent when empty."""


# ----------------------------------------------------------------- shared-memory extensions
class SystemSharedMemoryStatus(TypedDict):
    """One row of ``GET /v2/systemsharedmemory[/region/<r>]/status`` (gRPC
    ``SystemSharedMemoryStatusResponse.RegionStatus``)."""

    name: str
    key: str
    """The POSIX shm object's name (``shm_open``; ``"/input0"`` = ``/dev/shm/input0``)."""
    offset: int
    """Bytes from the object's start where the region begins."""
    byte_size: int


class CudaSharedMemoryStatus(TypedDict):
    """One row of ``GET /v2/cudasharedmemory[/region/<r>]/status`` (gRPC
    ``CudaSharedMemoryStatusResponse.RegionStatus``)."""

    name: str
    device_id: int
    byte_size: int


# ----------------------------------------------------------------- logging and trace extensions
class LogSettings(TypedDict):
    """``GET``/``POST /v2/logging`` (gRPC ``LogSettingsResponse``)."""

    log_file: str
    """The log file ("" = standard error); not changeable at runtime."""
    log_info: bool
    log_warning: bool
    log_error: bool
    log_verbose_level: int
    """0 = off; higher is more verbose."""
    log_format: str
    """``"default"`` or ``"ISO8601"``."""


class TraceSettings(TypedDict):
    """``GET``/``POST /v2[/models/<m>]/trace/setting`` (gRPC ``TraceSettingResponse``):
    every value a string, as on Triton's wire, ``trace_level`` a list."""

    trace_level: list[str]
    """``["OFF"]``, or some of ``"TIMESTAMPS"``, ``"TENSORS"``."""
    trace_rate: str
    """Trace one request in every ``trace_rate``."""
    trace_count: str
    """Requests left to trace ("-1" = no limit)."""
    log_frequency: NotRequired[str]
    """Flush the trace file every N traces ("0" = at exit); ``triton`` mode only."""
    trace_file: NotRequired[str]
    """``triton`` mode only."""
    trace_mode: str
    """``"triton"`` or ``"opentelemetry"``."""


# ----------------------------------------------------------------- config files (workbench's own)
class ConfigFile(TypedDict):
    """A model's config file as it is on disk (``ConfigFileService.model_config_file``)."""

    name: str
    path: str
    """The file loading reads (``<model>/config.pbtxt``)."""
    exists: bool
    text: str
    """Its text ("" when it does not exist: the model is auto-completed)."""
    backup_exists: bool
    """Whether ``<file>.bak`` exists (something to revert to)."""
    writable: bool
    reason: str
    """Why it is not writable ("" when it is)."""
    version: str
    """This model's file as read now (``<model>:<sha256 of its bytes>``, ``<model>:none``
    without a file): pass it back as ``expected_version`` when writing a text based on it."""


class ConfigWriteResult(TypedDict):
    """What writing or reverting a config file did (``ConfigFileService.write_model_config``)."""

    name: str
    path: str
    backup: str | None
    """The backup's path, or None (there was no previous file; a revert keeps none)."""
    restored_from: str | None
    """The backup a revert put back (it is gone after: a revert is done once); None for a
    write."""
    version: str
    """The file's version now (as ``ConfigFile.version``): the next write's
    ``expected_version``."""
    reloaded: bool
    """True when the model serves the new config."""
    reason: str
    """Why it was not reloaded ("" when it was)."""
    kept: bool
    """False when the reload of a written text failed and the file that served before was put
    back (with its backup); True otherwise."""
    dependents: list[str]
    """Each ensemble calling the model that cannot serve now, with why
    (``"ensemble 'e' is unavailable: ..."``); [] when none."""


__all__ = [
    "BatchStats",
    "ConfigFile",
    "ConfigWriteResult",
    "CudaSharedMemoryStatus",
    "InferStats",
    "LogSettings",
    "MemoryUsage",
    "ModelMetadata",
    "ModelStatisticsReport",
    "ModelStats",
    "RepositoryIndexRow",
    "ServerMetadata",
    "StatisticDuration",
    "SystemSharedMemoryStatus",
    "TensorMetadata",
    "TraceSettings",
]
