"""``workbench serve`` (the headless host, with tritonserver-style flags), ``workbench perf``
(the load generator, with perf_analyzer's flags: :mod:`workbench.perf.cli`), ``workbench tune``
(the config search under an SLA: :mod:`workbench.tuning.cli`), ``workbench tune-plan``
(several tuned models under one memory budget: :mod:`workbench.tuning.plan_cli`) and ``workbench
build-plan`` (a TensorRT plan from an ONNX model: :mod:`workbench.hosts.build_plan_cli`), ``workbench
deploy`` (Dockerfile and Kubernetes manifests: :mod:`workbench.hosts.deploy_command`), ``workbench
ray-serve`` (the engine on a Ray cluster: :mod:`workbench.ray.cli`).

    workbench serve --model-repository=sample_models/repository --http-port=8000
    workbench perf -m digits_mlp -u localhost:8000 --concurrency-range 1:16:4
    workbench tune -m digits_mlp --model-repository=sample_models/repository --sla-ms=10

Flags follow tritonserver's names and ``--flag=value`` spelling; boolean flags
accept ``--flag``, ``--flag=true`` or ``--flag=false``. ``serve``'s flags are generated from
:class:`~workbench.ServerOptions` (:mod:`workbench.hosts.server_flags`).
"""

from __future__ import annotations

import argparse
import sys

from workbench import __version__
from workbench.hosts import deploy_command
from workbench.hosts.build_plan_cli import add_build_plan_command, run_build_plan
from workbench.hosts.server_flags import add_server_flags, options_from_args
from workbench.perf import cli as perf_cli
from workbench.tuning import cli as tune_cli
from workbench.tuning import plan_cli


def build_parser() -> argparse.ArgumentParser:
    """The ``workbench`` argument parser (``serve``, ``perf``, ``tune``, ``tune-plan``,
    ``build-plan`` and ``deploy`` sub-commands)."""
    parser = argparse.ArgumentParser(prog="workbench", description="Model Serving Workbench")
    parser.add_argument("--version", action="version", version=f"workbench {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve a model repository over the v2 protocol")
    add_server_flags(serve)
    perf = commands.add_parser("perf", help="measure a model's throughput and latency "
                                            "(perf_analyzer's flags and reports)")
    perf_cli.add_arguments(perf)
    tune = commands.add_parser("tune", help="search a model's config (instances, batching, queue delay) for "
                                            "the best throughput under a latency SLA")
    tune_cli.add_arguments(tune)
    plan = commands.add_parser("tune-plan", help="choose settings for several tuned models under one "
                                                 "memory budget (from workbench tune --json results)")
    plan_cli.add_arguments(plan)
    add_build_plan_command(commands)
    deploy_command.add_parser(commands)
    ray_serve = commands.add_parser("ray-serve", help="serve a model repository on a Ray cluster (Ray Serve "
                                                     "replicas, v2 HTTP and gRPC at its ingress; the ray extra)")
    add_server_flags(ray_serve)
    from workbench.ray.cli import add_arguments as add_ray_arguments

    add_ray_arguments(ray_serve)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``workbench`` console script; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "build-plan":
        return run_build_plan(args)
    if args.command == "perf":
        return perf_cli.main(args)
    if args.command == "tune":
        return tune_cli.main(args)
    if args.command == "tune-plan":
        return plan_cli.main(args)
    if args.command == "deploy":
        return deploy_command.run(args, parser)
    try:
        options = options_from_args(args)
    except ValueError as exc:  # pydantic's ValidationError: out-of-range values
        parser.error(str(exc).replace("\n", "; "))
    if args.command == "ray-serve":
        from workbench.ray.cli import run as ray_run
        from workbench.ray.cli import scaling_from_args

        return ray_run(options, scaling_from_args(args), args.ray_address, args.proxy_location)
    from workbench.hosts.serve import run

    return run(options)


__all__ = ["build_parser", "main", "options_from_args"]


if __name__ == "__main__":
    sys.exit(main())
