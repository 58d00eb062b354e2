"""``workbench serve`` (the headless host, with tritonserver-style flags), ``workbench perf``
(the load generator, with perf_analyzer's flags: :mod:`workbench.perf.cli`) and ``workbench
build-plan`` (a TensorRT plan from an ONNX model: :mod:`workbench.hosts.build_plan_cli`), ``workbench
deploy`` (Dockerfile and Kubernetes manifests: :mod:`workbench.hosts.deploy_command`).

    workbench serve --model-repository=sample_models/repository --http-port=8000
    workbench perf -m digits_mlp -u localhost:8000 --concurrency-range 1:16:4

Flags follow tritonserver's names and ``--flag=value`` spelling; boolean flags
accept ``--flag``, ``--flag=true`` or ``--flag=false``.
"""

from __future__ import annotations

import argparse
import sys

from workbench import ServerOptions, __version__
from workbench.hosts import deploy_command
from workbench.hosts.build_plan_cli import add_build_plan_command, run_build_plan
from workbench.perf import cli as perf_cli
from workbench.switches import parse_switch


def _bool(value: str) -> bool:
    switch = parse_switch(value)
    if switch is not None:
        return switch
    raise argparse.ArgumentTypeError(f"expected true or false, got '{value}'")


def _port(value: str) -> int:
    try:
        port = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid port '{value}'") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port must be in 0..65535, got {port}")
    return port


def _flag(parser: argparse.ArgumentParser, name: str, help: str) -> None:
    parser.add_argument(name, type=_bool, nargs="?", const=True, default=None, help=help)


def build_parser() -> argparse.ArgumentParser:
    """The ``workbench`` argument parser (``serve``, ``perf`` and ``build-plan`` sub-commands)."""
    parser = argparse.ArgumentParser(prog="workbench", description="Model Serving Workbench")
    parser.add_argument("--version", action="version", version=f"workbench {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve a model repository over the v2 protocol")
    serve.add_argument("--model-repository", "--model-store", action="append", default=[],
                       required=True, help="model repository folder or s3:// gs:// az:// URL "
                                           "(repeatable)")
    serve.add_argument("--model-repository-cache", default=None, metavar="DIR",
                       help="where remote repositories are mirrored "
                            "(default ~/.cache/workbench/repositories)")
    serve.add_argument("--model-control-mode", choices=["none", "explicit", "poll"], default="none",
                       help="none: load every model at start, no changes after (default); "
                            "explicit: load --load-model at start, then the load/unload API; "
                            "poll: load every model at start, then rescan the repositories every "
                            "--repository-poll-secs and load new models, unload removed ones and "
                            "hot-reload changed ones (config, version folders, model files) "
                            "without dropping requests")
    serve.add_argument("--repository-poll-secs", type=float, default=None, metavar="SECONDS",
                       help="seconds between rescans in poll mode (default 15; 0 = never)")
    serve.add_argument("--load-model", action="append", default=[],
                       help="model to load at start in explicit mode ('*' = all; repeatable)")
    _flag(serve, "--strict-model-config", "no auto-complete of model configs")
    serve.add_argument("--disable-auto-complete-config", action="store_true",
                       help="same as --strict-model-config=true")
    _flag(serve, "--exit-on-error", "exit if a model fails to load at start (default true)")
    _flag(serve, "--strict-readiness", "ready only when every model is ready (default true)")
    serve.add_argument("--http-address", default="0.0.0.0")
    serve.add_argument("--http-port", type=_port, default=8000, help="0 = any free port")
    serve.add_argument("--http-max-input-size", type=int, default=None)
    _add_http_limit_flags(serve)
    serve.add_argument("--exit-timeout-secs", type=float, default=30.0)
    serve.add_argument("--log-verbose", type=int, default=0)
    serve.add_argument("--id", dest="server_id", default=None, help="server name in GET /v2")
    serve.add_argument("--model-load-thread-count", type=int, default=None,
                       help="models loaded in parallel, off the serving loop (default 4)")
    serve.add_argument("--backend-config", action="append", default=[],
                       help="BACKEND,KEY=VALUE, e.g. onnxruntime,default-max-batch-size=8")
    _add_metrics_flags(serve)
    _flag(serve, "--allow-client-shm", "let clients register shared-memory regions (default false)")
    _add_log_flags(serve)
    _add_restriction_flags(serve)


    _add_grpc_flags(serve)
    _add_header_forward_flags(serve)
    serve.add_argument("--rate-limit", "--rate-limiter", choices=["off", "execution_count"],
                       default=None, help="rate limiter mode (default off)")
    serve.add_argument("--rate-limit-resource", "--rate-limiter-resource", action="append",
                       default=[], metavar="NAME:COUNT[:DEVICE]", help="resource pool (repeatable)")
    serve.add_argument("--response-cache-byte-size", type=int, default=None,
                       help="response cache capacity in bytes (0 = no cache)")
    serve.add_argument("--cache-config", action="append", default=[], metavar="local,size=N",
                       help="tritonserver's cache flag; only the 'local' cache exists here")
    perf = commands.add_parser("perf", help="measure a model's throughput and latency "
                                            "(perf_analyzer's flags and reports)")
    perf_cli.add_arguments(perf)
    add_build_plan_command(commands)
    deploy_command.add_parser(commands)
    return parser


def _cache_byte_size(items: list[str]) -> int:
    """``["local,size=1048576"]`` -> 1048576 (tritonserver ``--cache-config``).

    Raises:
        SystemExit: another cache implementation or a malformed setting.
    """
    size = 0
    for item in items:
        name, _, setting = item.partition(",")
        key, _, value = setting.partition("=")
        if name != "local" or key != "size" or not value.isdigit():
            raise SystemExit(f"workbench: error: unsupported --cache-config '{item}' "
                             "(only 'local,size=<bytes>')")
        size = int(value)
    return size


#: HTTP connection-limit flags (beyond tritonserver) -> (type, help); field = flag name
HTTP_LIMIT_FLAGS = {
    "--http-max-connections": (int, "most open HTTP connections (default 0 = half the open-file "
                                    "limit, at most 4096); at the limit the longest-idle one is closed"),
    "--http-keepalive-timeout": (float, "seconds an idle keep-alive connection stays open (default 5)"),
    "--http-header-timeout": (float, "seconds for a request's head to arrive (default 30), then 408"),
    "--http-body-timeout": (float, "seconds a request body may pause (default 60), then 408"),
    "--http-max-header-size": (int, "largest request head in bytes (default 65536), else 431"),
    "--http-max-json-size": (int, "largest JSON part of an infer request in bytes (default "
                                  "67108864), else 400; also the JSON bytes parsed at once"),
}


def _add_http_limit_flags(serve: argparse.ArgumentParser) -> None:
    """Connection limits and timeouts of the HTTP listener (not tritonserver flags)."""
    for name, (kind, help) in HTTP_LIMIT_FLAGS.items():
        serve.add_argument(name, type=kind, default=None, help=help)


def _http_limit_values(args: argparse.Namespace) -> dict:
    """The HTTP limit flags that were given, as ServerOptions fields."""
    names = [flag[2:].replace("-", "_") for flag in HTTP_LIMIT_FLAGS]
    return {name: getattr(args, name) for name in names if getattr(args, name) is not None}


def _add_metrics_flags(serve: argparse.ArgumentParser) -> None:
    """tritonserver's Prometheus flags (``GET /metrics``, port 8002)."""
    _flag(serve, "--allow-metrics", "serve Prometheus metrics (default true)")
    _flag(serve, "--allow-cpu-metrics", "export nv_cpu_* metrics (default true)")
    _flag(serve, "--allow-gpu-metrics", "export nv_gpu_* metrics when NVML finds a GPU (default true)")
    serve.add_argument("--metrics-address", default=None, help="default 0.0.0.0")
    serve.add_argument("--metrics-port", type=_port, default=None,
                       help="default 8002; 0 = any free port")
    serve.add_argument("--metrics-interval-ms", type=int, default=None,
                       help="CPU/GPU metrics sampling interval in ms (default 2000)")
    serve.add_argument("--metrics-config", action="append", default=[], metavar="KEY=VALUE",
                       help="counter_latencies, histogram_latencies, summary_latencies=true|false; "
                            "summary_quantiles=0.5:0.05,0.9:0.01,... (repeatable)")


def _add_restriction_flags(serve: argparse.ArgumentParser) -> None:
    """tritonserver's restricted-API flags (:mod:`workbench.restrictions`)."""
    groups = "health, metadata, inference, shared-memory, model-config, model-repository, " \
             "statistics, trace, logging"
    serve.add_argument("--http-restricted-api", action="append", default=[],
                       metavar="<apis>:<key>=<value>",
                       help=f"HTTP API groups ({groups}) that need the header <key>: <value> "
                            "(else 403; repeatable)")
    serve.add_argument("--grpc-restricted-protocol", action="append", default=[],
                       metavar="<protocols>:<key>=<value>",
                       help="gRPC groups (same names) that need the metadata "
                            "triton-grpc-protocol-<key>: <value> (else UNAVAILABLE; repeatable)")


def _add_log_flags(serve: argparse.ArgumentParser) -> None:
    """tritonserver's logging and trace flags (changeable later through /v2/logging, /v2/trace)."""
    _flag(serve, "--log-info", "log INFO lines (default true)")
    _flag(serve, "--log-warning", "log WARNING lines (default true)")
    _flag(serve, "--log-error", "log ERROR lines (default true)")
    serve.add_argument("--log-format", choices=["default", "ISO8601"], default=None)
    serve.add_argument("--log-file", default=None, help="log to this file instead of stderr")
    serve.add_argument("--trace-config", action="append", default=[], metavar="[MODE,]KEY=VALUE",
                       help="level=OFF|TIMESTAMPS|TENSORS, rate=N, count=N, mode=triton|"
                            "opentelemetry, triton,file=PATH, triton,log-frequency=N (repeatable)")


#: ``--trace-config`` key -> ServerOptions field
_TRACE_KEYS = {"level": "trace_level", "rate": "trace_rate", "count": "trace_count",
               "mode": "trace_mode", "file": "trace_file", "log-frequency": "trace_log_frequency"}


def _trace_config(items: list[str]) -> dict:
    """``["triton,file=/tmp/t.json", "level=TIMESTAMPS"]`` -> ServerOptions trace fields.

    Raises:
        SystemExit: an unknown key or a malformed item.
    """
    values: dict = {}
    for item in items:
        setting = item.split(",", 1)[1] if "," in item.split("=", 1)[0] else item
        key, sep, value = setting.partition("=")
        if not sep or key not in _TRACE_KEYS:
            raise SystemExit(f"workbench: error: unsupported --trace-config '{item}'")
        if key == "level":
            values.setdefault("trace_level", []).append(value)
        else:
            values[_TRACE_KEYS[key]] = value
    return values


#: tritonserver's gRPC flags -> ServerOptions fields (integer values)
GRPC_INT_FLAGS = {
    "--grpc-infer-allocation-pool-size": "accepted for compatibility; no effect here",
    "--grpc-max-message-size": "largest message in bytes, both ways (default 2147483647)",
    "--grpc-keepalive-time": "ms between keepalive pings (default 7200000)",
    "--grpc-keepalive-timeout": "ms to wait for a keepalive answer (default 20000)",
    "--grpc-http2-max-pings-without-data": "default 2; 0 = unlimited",
    "--grpc-http2-min-recv-ping-interval-without-data": "ms (default 300000)",
    "--grpc-http2-max-ping-strikes": "default 2; 0 = unlimited",
}


def _add_grpc_flags(serve: argparse.ArgumentParser) -> None:
    """tritonserver's gRPC flags (``inference.GRPCInferenceService``, port 8001)."""
    _flag(serve, "--allow-grpc", "serve the gRPC API (default true)")
    serve.add_argument("--grpc-address", default=None, help="default 0.0.0.0")
    serve.add_argument("--grpc-port", type=_port, default=None, help="default 8001; 0 = any free port")
    _flag(serve, "--grpc-keepalive-permit-without-calls", "keepalive pings without calls (default false)")
    for name, help in GRPC_INT_FLAGS.items():
        serve.add_argument(name, type=int, default=None, help=help)
    serve.add_argument("--grpc-infer-response-compression-level", type=str.lower, default=None,
                       choices=["none", "low", "medium", "high"],
                       help="compress infer responses (default none; low/medium/high: gzip)")


def _add_header_forward_flags(serve: argparse.ArgumentParser) -> None:
    """tritonserver's header-forward flags (:mod:`workbench.frontends.header_forward`)."""
    serve.add_argument("--http-header-forward-pattern", default=None, metavar="REGEX",
                       help="HTTP headers whose name matches become request parameters "
                            "(case-insensitive; (?-i) prefix: case-sensitive)")
    serve.add_argument("--grpc-header-forward-pattern", default=None, metavar="REGEX",
                       help="gRPC metadata whose key matches become request parameters")


def _header_forward_values(args: argparse.Namespace) -> dict:
    """The header-forward flags that were given, as ServerOptions fields."""
    names = ("http_header_forward_pattern", "grpc_header_forward_pattern")
    return {name: getattr(args, name) for name in names if getattr(args, name) is not None}


def _grpc_values(args: argparse.Namespace) -> dict:
    """The gRPC flags that were given, as ServerOptions fields."""
    names = ["allow_grpc", "grpc_address", "grpc_port", "grpc_keepalive_permit_without_calls",
             "grpc_infer_response_compression_level"]
    names += [flag[2:].replace("-", "_") for flag in GRPC_INT_FLAGS]
    return {name: getattr(args, name) for name in names if getattr(args, name) is not None}


def _metrics_config(items: list[str]) -> dict[str, str]:
    """``["histogram_latencies=true"]`` -> ``{"histogram_latencies": "true"}``.

    Raises:
        ValueError: an item without ``=`` (unknown keys are refused by ServerOptions).
    """
    config = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--metrics-config expects KEY=VALUE, got '{item}'")
        config[key.strip()] = value.strip()
    return config


#: ``--backend-config`` settings this server uses: (backend or "" for every backend, setting)
_BACKEND_SETTINGS = {("onnxruntime", "default-max-batch-size"): "default_max_batch_size",
                     ("", "default-max-batch-size"): "default_max_batch_size"}


def _backend_config(items: list[str]) -> dict:
    """``--backend-config`` items -> ServerOptions fields, parsed as tritonserver's
    ``ParseBackendConfigOption``: ``<backend>,<setting>=<value>`` or ``<setting>=<value>``.
    Settings this server has no use for (the python backend's ``shm-default-byte-size``,
    ``stub-timeout-seconds``, other backends' keys) print a warning and are ignored: Triton
    hands every setting to its backend and does not fail on unknown ones.

    Raises:
        SystemExit: a malformed item (Triton's texts).
    """
    values: dict = {}
    for item in items:
        comma = item.find(",")
        equals = item.find("=", comma + 1)
        if comma == 0:
            raise SystemExit("workbench: error: No backend specified. --backend-config option format "
                             "is <backend name>,<setting>=<value> or <setting>=<value>. Got " + item)
        backend = item[:comma] if comma > 0 else ""
        setting, value = item[comma + 1:equals], item[equals + 1:]
        if equals < 0 or not setting or not value:
            raise SystemExit("workbench: error: --backend-config option format is "
                             f"'<backend name>,<setting>=<value>'. Got {item}")
        field = _BACKEND_SETTINGS.get((backend, setting))
        if field is None:
            print(f"workbench: warning: --backend-config '{item}' has no effect here (setting "
                  "not used by this server)", file=sys.stderr)
            continue
        try:
            values[field] = int(value)
        except ValueError:
            raise SystemExit(f"workbench: error: --backend-config '{item}': expected an integer") from None
    return values


def options_from_args(args: argparse.Namespace) -> ServerOptions:
    """Map parsed flags onto :class:`ServerOptions` (unset flags keep the defaults).

    Raises:
        SystemExit: a malformed ``--backend-config`` item (unknown settings only warn).
        ValueError: a malformed ``--metrics-config`` item or out-of-range value.
    """
    values: dict = {
        "model_repository": args.model_repository,
        "model_control_mode": args.model_control_mode,
        "load_model": args.load_model,
        "http_address": args.http_address,
        "http_port": args.http_port,
        "exit_timeout_secs": args.exit_timeout_secs,
        "log_verbose": args.log_verbose,
    }
    strict = args.strict_model_config or args.disable_auto_complete_config
    optional = {
        "strict_model_config": strict or None,
        "exit_on_error": args.exit_on_error,
        "strict_readiness": args.strict_readiness,
        "server_id": args.server_id,
        "model_load_thread_count": args.model_load_thread_count,
        "repository_poll_secs": args.repository_poll_secs,
        "model_repository_cache": args.model_repository_cache,
        "http_max_input_size": args.http_max_input_size,
        "allow_metrics": args.allow_metrics,
        "allow_cpu_metrics": args.allow_cpu_metrics,
        "allow_gpu_metrics": args.allow_gpu_metrics,
        "metrics_address": args.metrics_address,
        "metrics_port": args.metrics_port,
        "metrics_interval_ms": args.metrics_interval_ms,
        "allow_client_shm": args.allow_client_shm,
        "log_info": args.log_info,
        "log_warning": args.log_warning,
        "log_error": args.log_error,
        "log_format": args.log_format,
        "log_file": args.log_file,
        "http_restricted_api": args.http_restricted_api or None,
        "grpc_restricted_protocol": args.grpc_restricted_protocol or None,
    }
    values.update({k: v for k, v in optional.items() if v is not None})
    values.update(_grpc_values(args))
    values.update(_header_forward_values(args))
    values.update(_http_limit_values(args))
    if args.metrics_config:
        values["metrics_config"] = _metrics_config(args.metrics_config)
    values.update(_trace_config(args.trace_config))
    if args.rate_limit is not None:
        values["rate_limit"] = args.rate_limit
    values["rate_limit_resource"] = args.rate_limit_resource
    if args.cache_config:
        values["response_cache_byte_size"] = _cache_byte_size(args.cache_config)
    if args.response_cache_byte_size is not None:
        values["response_cache_byte_size"] = args.response_cache_byte_size
    values.update(_backend_config(args.backend_config))
    return ServerOptions(**values)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``workbench`` console script; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "build-plan":
        return run_build_plan(args)
    if args.command == "perf":
        return perf_cli.main(args)
    if args.command == "deploy":
        return deploy_command.run(args, parser)
    try:
        options = options_from_args(args)
    except ValueError as exc:  # pydantic's ValidationError: out-of-range values
        parser.error(str(exc).replace("\n", "; "))
    from workbench.hosts.serve import run

    return run(options)


if __name__ == "__main__":
    sys.exit(main())
