"""Server options: one settings object, filled by the CLI, traitlets or the environment.

Field names mirror tritonserver's flags (``--model-repository`` ->
``model_repository``); environment variables use the ``WORKBENCH_`` prefix. The fields are
also the declaration of ``workbench serve``'s flags: a field's :class:`~workbench.startup.flags.Flag`
(when its spelling differs from the default), type, default and docstring become the flag,
its parser, its default and its ``--help`` text (:mod:`workbench.hosts.cli`).
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from workbench.files.model_files import MAX_CONFIG_BYTES
from workbench.startup.flags import Flag, non_empty, port
from workbench.startup.restrictions import GRPC_KEY_PREFIX, Restriction, parse_restrictions

#: the ``--metrics-config`` keys this server understands (tritonserver's names, and
#: ``workbench_histograms``, beyond Triton: the duration and batch-size histograms).
METRICS_CONFIG_KEYS = ("counter_latencies", "histogram_latencies", "summary_latencies",
                       "summary_quantiles", "workbench_histograms")
#: the ``--metrics-config`` keys whose value is ``true`` or ``false``
_SWITCH_KEYS = ("counter_latencies", "histogram_latencies", "summary_latencies", "workbench_histograms")


#: the trace fields, all set through tritonserver's ``--trace-config [MODE,]KEY=VALUE``
TRACE_CONFIG = Flag(via="--trace-config")


def metrics_config_items(items: list[str]) -> dict[str, str]:
    """``--metrics-config`` values -> the ``metrics_config`` field:
    ``["histogram_latencies=true"]`` -> ``{"histogram_latencies": "true"}`` (unknown keys and
    values are refused by the field's validator).

    Raises:
        ValueError: an item without ``=``.
    """
    config = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--metrics-config expects KEY=VALUE, got '{item}'")
        config[key.strip()] = value.strip()
    return config


class ServerOptions(BaseSettings):
    """Everything `workbench serve` and the engine can be told."""

    model_config = SettingsConfigDict(env_prefix="WORKBENCH_", extra="forbid",
                                      use_attribute_docstrings=True)

    model_repository: Annotated[list[str], Flag(aliases=("--model-store",), required=True)] = Field(
        default_factory=list)
    """Model repository folders (tritonserver ``--model-repository``, repeatable), or
    remote repository URLs (``s3://``, ``gs://``, ``az://``, ``abfs://``; see
    :mod:`workbench.repository.remote`), mirrored into ``model_repository_cache``."""

    model_repository_cache: Annotated[str | None, Flag(metavar="DIR")] = None
    """Folder where remote repositories are mirrored (one sub-folder per URL); default
    ``$XDG_CACHE_HOME/workbench/repositories`` or ``~/.cache/workbench/repositories``."""

    model_control_mode: Literal["none", "explicit", "poll"] = "none"
    """tritonserver ``--model-control-mode``. ``none``: load everything at start, then no
    changes and no load/unload API; ``explicit``: only ``load_model`` at start, then the
    repository API decides; ``poll``: load everything at start, then rescan the
    repositories every ``repository_poll_secs`` and load, unload or hot-reload what changed
    (load/unload API refused, as in ``none``)."""

    repository_poll_secs: Annotated[float, Flag(metavar="SECONDS")] = Field(default=15.0, ge=0)
    """Seconds between two rescans in ``poll`` mode (tritonserver ``--repository-poll-secs``,
    default 15); 0 = no periodic rescan (as tritonserver). Fractions are accepted."""

    load_model: list[str] = Field(default_factory=list)
    """Models to load at start in explicit mode (``*`` = all)."""

    strict_model_config: bool = False
    """True = no auto-complete from model files (``--strict-model-config=true`` /
    ``--disable-auto-complete-config``)."""

    exit_on_error: bool = True
    """Exit at start-up if any model fails to load (tritonserver's default)."""

    strict_readiness: bool = True
    """``/v2/health/ready`` is 200 only when every model that should load is READY."""

    server_id: Annotated[str, Flag("--id")] = "triton"
    """Server name reported by ``GET /v2`` and gRPC ``ServerMetadata`` (tritonserver ``--id``,
    default "triton" as there: Triton's clients and examples check it). The ``version`` beside
    it is this product's own version, not a tritonserver release number."""

    http_address: str = "0.0.0.0"
    """Address the HTTP service binds (``--http-address``)."""

    http_port: Annotated[int, Flag(parse=port)] = Field(default=8000, ge=0, le=65535)
    """HTTP port; 0 binds a free port (the bound port is logged and readable from the host)."""

    reuse_http_port: bool = False
    """Let several servers listen on the HTTP port, each started with this set
    (``SO_REUSEPORT``; tritonserver's ``--reuse-http-port``): the kernel spreads new
    connections over them. The dashboard's switch to headless starts ``workbench serve`` with
    it (docs/headless-switch.md)."""

    allow_grpc: bool = True
    """Serve Triton's gRPC API on ``grpc_address:grpc_port`` (``--allow-grpc``)."""

    grpc_address: str = "0.0.0.0"
    """Address the gRPC service binds (``--grpc-address``)."""

    grpc_port: Annotated[int, Flag(parse=port)] = Field(default=8001, ge=0, le=65535)
    """gRPC port; 0 binds a free port (logged as ``Started GRPCInferenceService at ...``)."""

    reuse_grpc_port: bool = False
    """Let several servers listen on the gRPC port, each started with this set (grpc's
    ``grpc.so_reuseport``; tritonserver's ``--reuse-grpc-port``)."""

    grpc_frontend: Literal["auto", "native", "python"] = "auto"
    """Which gRPC front end serves the port (``--grpc-frontend``; not a tritonserver flag,
    docs/grpc-native.md): ``python`` is grpc.aio on the engine's loop; ``native`` is the C++
    front end built by ``make setup`` (HTTP/2 and ModelInfer's protobuf on its own threads);
    ``auto`` picks python while native lacks the connection cap (docs/grpc-native.md). ``native``
    where the extension is not built, or with ``--grpc-restricted-protocol``, serves with python
    (logged)."""

    grpc_native_threads: int = Field(default=2, ge=1, le=64)
    """Completion-queue threads of the native gRPC front end (``--grpc-native-threads``; not a
    tritonserver flag): HTTP/2, reading and parsing requests, writing responses; the engine's
    Python thread is not one of them."""

    grpc_infer_allocation_pool_size: int = Field(default=8, ge=0)
    """Accepted for tritonserver compatibility (``--grpc-infer-allocation-pool-size``); it
    sizes a C++ response-object pool there and has no effect here."""

    grpc_max_message_size: int = Field(default=2**31 - 1, gt=0, le=2**31 - 1)
    """Largest gRPC message received or sent, bytes (default INT32_MAX, as tritonserver); a
    compressed message is also bounded by ``grpc_max_decompressed_size`` once inflated."""

    grpc_max_decompressed_size: int = Field(default=64 * 1024 * 1024, gt=0, le=2**31 - 1)
    """Largest gRPC request message once decompressed, bytes (one sent with ``grpc-encoding:
    gzip`` or ``deflate``): inflating stops there and the call is answered RESOURCE_EXHAUSTED,
    so a small compressed message cannot make the server hold gigabytes. Default 64 MiB, as
    ``--http-max-input-size``; uncompressed messages are bounded by ``grpc_max_message_size``
    alone. Not a tritonserver flag (its gRPC library inflates up to the message size)."""

    grpc_max_connections: int = Field(default=0, ge=0)
    """Most gRPC connections open at once; 0 = automatic: a quarter of the process's open-file
    limit (``RLIMIT_NOFILE``; HTTP's automatic cap takes half), at most 4096. A connection beyond
    it is closed as soon as it is accepted (grpc-core's ``grpc.max_allowed_incoming_connections``),
    so idle connections cannot take the descriptors the HTTP port and the models need. Not a
    tritonserver flag."""

    grpc_max_concurrent_streams: int = Field(default=128, gt=0)
    """Most calls (HTTP/2 streams) open at once on one gRPC connection: the server's HTTP/2
    ``SETTINGS_MAX_CONCURRENT_STREAMS``. A client queues its calls beyond it until one ends; a
    stream opened beyond it anyway is refused (RST_STREAM). Default 128. Not a tritonserver flag
    (its gRPC library allows any number)."""

    grpc_max_connection_age_ms: int = Field(default=0, ge=0)
    """Milliseconds a gRPC connection lives before the server sends it GOAWAY (gRPC's
    ``grpc.max_connection_age_ms``, ±10 % jitter; in-flight calls finish, clients reconnect
    without a failed call); 0 = for ever. The switch to headless needs it: a gRPC server
    that stops cancels the calls a busy connection sends meanwhile, so connections must
    leave before (docs/headless-switch.md). Not a tritonserver flag."""

    grpc_max_stream_unsent_size: int = Field(default=64 * 1024 * 1024, gt=0)
    """Most bytes of ``ModelStreamInfer`` responses that may wait on one stream for its client to
    read them (each counted as its serialized size plus 128 bytes; the one being written and one
    more may be of any size). Beyond it the stream is cancelled: its requests in flight are
    cancelled, the waiting responses dropped, and the client gets RESOURCE_EXHAUSTED once it reads
    what was sent. Default 64 MiB. Not a tritonserver flag (its ``--grpc-max-response-pool-size``,
    unbounded by default, makes the model wait instead)."""

    grpc_keepalive_time: int = Field(default=7_200_000, gt=0)
    """Milliseconds between keepalive pings on idle connections (``--grpc-keepalive-time``)."""

    grpc_keepalive_timeout: int = Field(default=20_000, gt=0)
    """Milliseconds to wait for a keepalive ping's answer (``--grpc-keepalive-timeout``)."""

    grpc_keepalive_permit_without_calls: bool = False
    """Allow keepalive pings without calls in flight (``--grpc-keepalive-permit-without-calls``)."""

    grpc_http2_max_pings_without_data: int = Field(default=2, ge=0)
    """Pings sent without data before a data frame is needed; 0 = unlimited
    (``--grpc-http2-max-pings-without-data``)."""

    grpc_http2_min_recv_ping_interval_without_data: int = Field(default=300_000, ge=0)
    """Least milliseconds between received pings without data before one counts as a strike
    (``--grpc-http2-min-recv-ping-interval-without-data``)."""

    grpc_http2_max_ping_strikes: int = Field(default=2, ge=0)
    """Bad pings tolerated before the connection is closed; 0 = any number
    (``--grpc-http2-max-ping-strikes``)."""

    exit_timeout_secs: float = Field(default=30.0, ge=0)
    """Seconds to let in-flight requests finish on shutdown (SIGTERM/SIGINT)."""

    log_verbose: int = Field(default=0, ge=0)
    """Verbose logging level; > 0 logs every request."""

    log_info: bool = True
    """Log INFO lines (``--log-info``; changeable at runtime through ``/v2/logging``)."""

    log_warning: bool = True
    """Log WARNING lines (``--log-warning``)."""

    log_error: bool = True
    """Log ERROR lines (``--log-error``)."""

    log_format: Literal["default", "ISO8601"] = "default"
    """Log line format (``--log-format``): ``default`` = ``I0102 15:04:05.123456 pid file:line]``,
    ``ISO8601`` = ``2024-01-02T15:04:05Z I pid file:line]`` (UTC)."""

    log_file: str = ""
    """Write the log to this file instead of stderr (``--log-file``; not changeable at runtime)."""

    trace_level: Annotated[list[Literal["OFF", "TIMESTAMPS", "TENSORS"]], TRACE_CONFIG] = Field(
        default_factory=list)
    """Start-up trace level (``--trace-config level=...``, repeatable); empty or any OFF =
    OFF. Traces go to ``trace_file`` (triton mode) or the OTLP receiver (opentelemetry)."""

    trace_rate: Annotated[int, TRACE_CONFIG] = Field(default=1000, ge=0)
    """Trace one request in N (``--trace-config rate=N``)."""

    trace_count: Annotated[int, TRACE_CONFIG] = Field(default=-1, ge=-1)
    """Number of traces to collect, -1 = no limit (``--trace-config count=N``)."""

    trace_log_frequency: Annotated[int, TRACE_CONFIG] = Field(default=0, ge=0)
    """Traces per trace file, 0 = one file (``--trace-config triton,log-frequency=N``)."""

    trace_file: Annotated[str, TRACE_CONFIG] = ""
    """Trace file (``--trace-config triton,file=PATH``); tracing in triton mode needs one."""

    trace_mode: Annotated[Literal["triton", "opentelemetry"], TRACE_CONFIG] = "triton"
    """Trace mode (``--trace-config mode=triton|opentelemetry``)."""

    # -- OpenTelemetry trace mode (``--trace-config opentelemetry,KEY=VALUE``; the ``trace`` extra)
    trace_opentelemetry_url: Annotated[str, TRACE_CONFIG] = "http://localhost:4318/v1/traces"
    """OTLP/HTTP endpoint spans are exported to (``--trace-config opentelemetry,url=URL``)."""

    trace_opentelemetry_resource: Annotated[list[str], TRACE_CONFIG] = Field(default_factory=list)
    """Resource attributes ``KEY=VALUE`` (``--trace-config opentelemetry,resource=K=V``,
    repeatable) over ``service.name=triton-inference-server`` and ``OTEL_RESOURCE_ATTRIBUTES``."""

    trace_opentelemetry_bsp_max_queue_size: Annotated[int | None, TRACE_CONFIG] = Field(default=None, ge=1)
    """Batch span processor queue size (``opentelemetry,bsp_max_queue_size=N``); None: the
    ``OTEL_BSP_MAX_QUEUE_SIZE`` environment variable or 2048."""

    trace_opentelemetry_bsp_schedule_delay: Annotated[int | None, TRACE_CONFIG] = Field(default=None, ge=0)
    """Milliseconds between two exports (``opentelemetry,bsp_schedule_delay=MS``); None:
    ``OTEL_BSP_SCHEDULE_DELAY`` or 5000."""

    trace_opentelemetry_bsp_max_export_batch_size: Annotated[int | None, TRACE_CONFIG] = Field(
        default=None, ge=1)
    """Spans per export (``opentelemetry,bsp_max_export_batch_size=N``, at most the queue
    size); None: ``OTEL_BSP_MAX_EXPORT_BATCH_SIZE`` or 512."""

    default_max_batch_size: Annotated[int, Flag(via="--backend-config")] = Field(default=4, ge=0)
    """max_batch_size given to batchable ONNX models whose config has none
    (``--backend-config=onnxruntime,default-max-batch-size=N``)."""

    backend_directory: Annotated[str, Flag(metavar="DIR")] = "/opt/tritonserver/backends"
    """tritonserver ``--backend-directory`` ("The global directory searched for backend shared
    libraries. Default is '/opt/tritonserver/backends'."). Here it holds Python-based backends:
    a model whose config says ``backend: "<name>"`` for a backend this server does not have
    built in runs ``<DIR>/<name>/model.py`` in the Python backend (its version folders then
    need no model.py). Shared libraries there are not loaded (Python backends only)."""

    model_load_thread_count: int = Field(default=4, ge=1)
    """Threads that load models in parallel (tritonserver ``--model-load-thread-count``)."""

    model_load_retry_count: int = Field(default=0, ge=0)
    """tritonserver ``--model-load-retry-count``: how many more times a model version whose
    instances failed to load (backend, model file, warmup) is loaded again before it is
    UNAVAILABLE (each retry at once, as Triton's ``ModelLifeCycle``; a config error is not
    retried). Default 0."""

    model_config_name: Annotated[str, Flag(metavar="NAME", parse=non_empty)] = ""
    """tritonserver ``--model-config-name``: each model reads ``configs/<NAME>.pbtxt`` of its
    folder when that file exists, else ``config.pbtxt`` (or auto-complete), at every load and
    poll; the config editor edits the file in use. Empty = always ``config.pbtxt``. A name
    with a space or a path separator is refused (Triton only documents "no space")."""

    model_config_max_size: Annotated[int, Flag(metavar="BYTES")] = Field(default=MAX_CONFIG_BYTES, gt=0)
    """Largest model config file read from a model repository (``config.pbtxt``), and largest
    config text the config editor validates or writes, bytes (default 1 MiB). A larger file
    fails that model's load ("failed to read text proto from <path>: <n> bytes, more than
    the <limit> bytes allowed"), before it is read. Not a tritonserver flag: Triton reads any
    size, and parsing a config costs seconds per MiB here."""

    http_max_input_size: int = Field(default=64 * 1024 * 1024, gt=0)
    """Largest JSON part of an HTTP request, raw binary infer body, and decompressed body,
    bytes (tritonserver ``--http-max-input-size``, its texts; as in tritonserver, the binary
    tensor data after an infer request's JSON header is not bounded by it, see
    ``http_max_binary_size``)."""

    http_max_binary_size: int = Field(default=2**31 - 1, gt=0)
    """Largest binary tensor data of one HTTP infer request (the body after its
    ``Inference-Header-Content-Length`` JSON header), bytes; a larger body gets 400 before it is
    read when ``Content-Length`` tells, else as soon as the bytes read pass it. Default INT32_MAX,
    as gRPC's message size. Not a tritonserver flag (tritonserver reads any size)."""

    http_max_json_size: int = Field(default=64 * 1024 * 1024, gt=0)
    """Largest JSON part of an HTTP infer request, bytes: the whole body, or the JSON header
    of a binary-extension body (400 otherwise, before the body is read when Content-Length
    tells). Parsing JSON tensors costs several times the text, so this bounds a request's
    memory even when ``http_max_input_size`` is raised for binary tensors; it is also the
    budget of JSON bytes decoded or encoded at once on worker threads. Not a tritonserver
    flag."""

    http_max_control_body_size: int = Field(default=64 * 1024, gt=0)
    """Largest request body of the HTTP routes other than infer, generate and model load
    (logging and trace settings, repository index and unload, shared-memory registration,
    health, metadata), bytes: their bodies are a few hundred bytes of JSON. A larger one gets
    413 and the connection is closed, before the body is read when ``Content-Length`` tells,
    else as soon as the bytes read pass the limit. Not a tritonserver flag (tritonserver bounds
    these bodies by ``--http-max-input-size``)."""

    # --- HTTP connection limits (beyond tritonserver, which has no such flags) ---
    http_max_connections: int = Field(default=0, ge=0)
    """Most HTTP connections open at once; 0 = automatic: half the process's open-file limit
    (``RLIMIT_NOFILE``; gRPC's automatic cap takes a quarter), at most 4096. At the limit a new
    connection closes the one that has been idle longest (no request in progress: waiting for a
    head or between keep-alive requests); when every connection has a request in progress the new
    one gets 503 and is closed. Not a tritonserver flag."""

    http_keepalive_timeout: float = Field(default=5.0, gt=0)
    """Seconds an idle keep-alive HTTP connection stays open after a response (uvicorn's
    ``timeout_keep_alive``). Not a tritonserver flag."""

    http_header_timeout: float = Field(default=30.0, gt=0)
    """Seconds a request's head (request line and headers) may take to arrive, counted from
    the moment the connection opens or the first byte of a later request on it arrives; then
    408 and the connection is closed (silently when no byte came). Not a tritonserver flag."""

    http_body_timeout: float = Field(default=60.0, gt=0)
    """Seconds a request body may go without a new byte arriving (while the server is
    reading it); then 408 and the connection is closed. Not a tritonserver flag."""

    http_body_min_rate: float = Field(default=500.0, ge=0)
    """Bytes/s a request body must arrive at, after its first second, for its connection to
    keep its place when the connections are at ``http_max_connections`` and none is idle: a
    new connection then closes the one whose body is furthest behind (408), so connections
    that trickle their bodies cannot lock out health checks and new clients (as Apache
    mod_reqtimeout's ``MinRate``, which defaults to 500). Below the cap no body is closed for
    its rate (``http_body_timeout`` still bounds pauses); 0 = never. Not a tritonserver flag."""

    http_max_header_size: int = Field(default=64 * 1024, gt=0)
    """Largest request head (request line and headers), bytes; larger heads get 431 and the
    connection is closed. Not a tritonserver flag."""

    rate_limit: Annotated[Literal["off", "execution_count"], Flag(aliases=("--rate-limiter",))] = "off"
    """``execution_count``: instances execute only while holding their instance group's
    ``rate_limiter`` resources (tritonserver ``--rate-limit``)."""

    rate_limit_resource: Annotated[list[str], Flag(aliases=("--rate-limiter-resource",),
                                                   metavar="NAME:COUNT[:DEVICE]")] = Field(
        default_factory=list)
    """Resource pools ``NAME:COUNT[:DEVICE]`` (tritonserver ``--rate-limit-resource``);
    resources not listed get the largest count any instance asks for."""

    response_cache_byte_size: int = Field(default=0, ge=0)
    """Response cache capacity in bytes; 0 = no cache. Models opt in with
    ``response_cache { enable: true }`` (tritonserver ``--cache-config local,size=N``)."""

    allow_metrics: bool = True
    """Serve Prometheus metrics on ``metrics_address:metrics_port`` (``--allow-metrics``)."""

    allow_cpu_metrics: bool = True
    """Export ``nv_cpu_utilization`` and ``nv_cpu_memory_*_bytes`` (``--allow-cpu-metrics``)."""

    allow_gpu_metrics: bool = True
    """Export ``nv_gpu_*`` per GPU when NVML (``nvidia-ml-py``) is importable and finds one
    (``--allow-gpu-metrics``)."""

    metrics_address: str = "0.0.0.0"
    """Address the metrics endpoint binds (``--metrics-address``)."""

    metrics_port: Annotated[int, Flag(parse=port)] = Field(default=8002, ge=0, le=65535)
    """Metrics port (``GET /metrics``); 0 binds a free port (logged like the HTTP one)."""

    reuse_metrics_port: bool = False
    """Let several servers listen on the metrics port, each started with this set
    (``SO_REUSEPORT``). Not a tritonserver flag (it has ``--reuse-http-port`` and
    ``--reuse-grpc-port`` only); the switch to headless shares all three ports."""

    metrics_interval_ms: int = Field(default=2000, gt=0)
    """How often CPU and GPU metrics are sampled, milliseconds (``--metrics-interval-ms``)."""

    allow_client_shm: bool = False
    """Let clients register, unregister and use shared-memory regions (tritonserver
    ``--allow-client-shm``, off by default since Triton 2.73; status queries always work)."""

    http_restricted_api: Annotated[list[str], Flag(metavar="<apis>:<key>=<value>")] = Field(
        default_factory=list)
    """tritonserver ``--http-restricted-api=<api>[,<api>...]:<key>=<value>`` (repeatable):
    requests to those API groups (``health``, ``metadata``, ``inference``, ``shared-memory``,
    ``model-config``, ``model-repository``, ``statistics``, ``trace``, ``logging``) need the
    header ``<key>: <value>``, else 403 (:mod:`workbench.startup.restrictions`)."""

    grpc_restricted_protocol: Annotated[list[str], Flag(metavar="<protocols>:<key>=<value>")] = Field(
        default_factory=list)
    """tritonserver ``--grpc-restricted-protocol=<protocol>[,...]:<key>=<value>``: the gRPC
    methods of those groups need the metadata ``triton-grpc-protocol-<key>: <value>``, else
    UNAVAILABLE (Triton's prefix and code)."""

    grpc_infer_response_compression_level: Annotated[Literal["none", "low", "medium", "high"],
                                                     Flag(parse=str.lower)] = "none"
    """tritonserver ``--grpc-infer-response-compression-level``: compress ``ModelInfer`` and
    ``ModelStreamInfer`` responses (default none). gRPC Python picks an algorithm per call,
    not a level: low, medium and high all compress with gzip (the client must accept it,
    as every gRPC client does)."""

    # --- header forwarding (tritonserver's flags; workbench.frontends.header_forward) ---
    http_header_forward_pattern: Annotated[str, Flag(metavar="REGEX")] = ""
    """tritonserver ``--http-header-forward-pattern``: HTTP request headers whose name matches
    this regular expression (case-insensitive, partial match; a leading ``(?-i)`` makes it
    case-sensitive) are passed to the model as string request parameters; a matching header
    with a reserved name (``sequence_id``, ``priority``, ``timeout``, ``triton_*``, ...) fails
    the request (400). Empty = forward nothing."""

    grpc_header_forward_pattern: Annotated[str, Flag(metavar="REGEX")] = ""
    """tritonserver ``--grpc-header-forward-pattern``: the same for gRPC metadata
    (``ModelInfer`` and every request of a ``ModelStreamInfer`` stream; INVALID_ARGUMENT)."""

    @field_validator("http_header_forward_pattern", "grpc_header_forward_pattern")
    @classmethod
    def _valid_forward_pattern(cls, value: str) -> str:
        pattern = value[5:] if value.startswith("(?-i)") else value
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"invalid header forward pattern '{value}': {exc}") from None
        return value

    metrics_config: Annotated[dict[str, str], Flag(metavar="KEY=VALUE", combine=metrics_config_items)] = Field(
        default_factory=dict)
    """tritonserver ``--metrics-config KEY=VALUE`` settings: ``counter_latencies`` (default
    true), ``histogram_latencies``, ``summary_latencies`` (default false) and
    ``summary_quantiles`` (``0.5:0.05,0.9:0.01,...``); beyond Triton,
    ``workbench_histograms`` (default false): request / queue / compute duration and formed
    batch size histograms (docs/live.md)."""

    @field_validator("model_config_name")
    @classmethod
    def _valid_config_name(cls, value: str) -> str:
        if any(c.isspace() or c in "/\\\0" for c in value) or value in (".", ".."):
            raise ValueError(f"invalid --model-config-name '{value}': a file name without spaces "
                             "or path separators is expected")
        return value

    @field_validator("http_restricted_api")
    @classmethod
    def _valid_http_restrictions(cls, value: list[str]) -> list[str]:
        parse_restrictions(value, "http-restricted-api")
        return value

    @field_validator("grpc_restricted_protocol")
    @classmethod
    def _valid_grpc_restrictions(cls, value: list[str]) -> list[str]:
        parse_restrictions(value, "grpc-restricted-protocol", GRPC_KEY_PREFIX, "protocol")
        return value

    def http_restrictions(self) -> dict[str, Restriction]:
        """The restricted HTTP API groups: ``{group: Restriction}`` (empty: none)."""
        return parse_restrictions(self.http_restricted_api, "http-restricted-api")

    def grpc_restrictions(self) -> dict[str, Restriction]:
        """The restricted gRPC groups, header names with Triton's ``triton-grpc-protocol-``."""
        return parse_restrictions(self.grpc_restricted_protocol, "grpc-restricted-protocol",
                                  GRPC_KEY_PREFIX, "protocol")

    @field_validator("metrics_config")
    @classmethod
    def _known_metrics_config(cls, value: dict[str, str]) -> dict[str, str]:
        for key, setting in value.items():
            if key not in METRICS_CONFIG_KEYS:
                raise ValueError(f"unknown --metrics-config key '{key}'; known: "
                                 + ", ".join(METRICS_CONFIG_KEYS))
            if key in _SWITCH_KEYS and setting.strip().lower() not in ("true", "false"):
                raise ValueError(f"--metrics-config {key} must be true or false, got '{setting}'")
            if key == "summary_quantiles":
                _check_quantiles(setting)
        return value


def _check_quantiles(text: str) -> None:
    """``summary_quantiles`` is ``<quantile>:<error>,...`` with quantiles in (0, 1)."""
    for item in filter(None, (part.strip() for part in text.split(","))):
        quantile, _, error = item.partition(":")
        try:
            valid = 0.0 < float(quantile) < 1.0 and float(error or 0) >= 0
        except ValueError:
            valid = False
        if not valid:
            raise ValueError(f"invalid summary_quantiles item '{item}', expected <quantile>:<error> "
                             "with the quantile in (0, 1)")


__all__ = ["ServerOptions"]
