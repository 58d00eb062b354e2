"""``workbench deploy``: write a Dockerfile and Kubernetes manifests for a model repository.

    workbench deploy --model-repository=sample_models/repository --out=deploy/ [--name=digits ...]

The third-party packages the Python-backend models import go into the image
(``requirements-models.txt``); imports nothing installed here provides are printed as warnings
on stderr (the image would not load those models).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from workbench.deploy import DeploySpec, python_requirements, write_deployment
from workbench.deploy.nginx import DEFAULT_REPLICAS, NginxSpec, Replica
from workbench.deploy.writer import check_folders


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Add the ``deploy`` sub-command to the ``workbench`` parser."""
    deploy = commands.add_parser("deploy", help="write a Dockerfile and Kubernetes manifests "
                                                "(Deployment, Service, HPA on queue time)")
    defaults = DeploySpec()
    deploy.add_argument("--model-repository", required=True, help="local model repository folder")
    deploy.add_argument("--out", required=True, help="output folder (created; files overwritten)")
    deploy.add_argument("--name", default=defaults.name, help="Deployment / Service name")
    deploy.add_argument("--image", default=defaults.image, help="image the Deployment runs")
    deploy.add_argument("--model-control-mode", choices=["none", "explicit", "poll"],
                        default=defaults.model_control_mode)
    for flag in ("http-port", "grpc-port", "metrics-port", "replicas", "min-replicas",
                 "max-replicas", "exit-timeout-secs"):
        field = flag.replace("-", "_").replace("secs", "s")
        deploy.add_argument(f"--{flag}", type=int, default=getattr(defaults, field))
    deploy.add_argument("--queue-time-target-us", type=int, default=defaults.queue_time_target_us,
                        help="HPA target: mean queue time per request, microseconds")
    deploy.add_argument("--shm-size", default=defaults.shm_size, help="/dev/shm size (e.g. 1Gi)")
    deploy.add_argument("--restricted-api", default=",".join(defaults.restricted_api),
                        help="comma-separated Triton API groups that need the API key from a "
                             "Kubernetes Secret (default model-repository; '' for none; "
                             "never health: the probes carry no key)")
    deploy.add_argument("--api-key-secret", default="",
                        help="the Secret (key 'api-key') holding the API key (default NAME-api-key)")
    # the Prometheus alert rules' thresholds (workbench/deploy/alerts.py)
    deploy.add_argument("--alert-error-rate", type=float, default=defaults.alert_error_rate,
                        help="alert when this fraction of a model's requests fail (0..1)")
    deploy.add_argument("--alert-p99-latency-us", type=int, default=defaults.alert_p99_latency_us,
                        help="alert when the p99 request latency is above this, microseconds")
    deploy.add_argument("--alert-queue-time-us", type=int, default=defaults.alert_queue_time_us,
                        help="alert when the mean queue time is above this, microseconds")
    deploy.add_argument("--alert-pending-requests", type=int,
                        default=defaults.alert_pending_requests,
                        help="alert when more requests than this are pending and growing")
    deploy.add_argument("--alert-gpu-memory-fraction", type=float,
                        default=defaults.alert_gpu_memory_fraction,
                        help="alert when this fraction of a GPU's memory is used (0..1)")
    deploy.add_argument("--alert-matchers", default="",
                        help='PromQL label matchers selecting the deployment\'s series in the '
                             'alert rules and dashboard (default job="NAME")')
    # nginx in front of replicas (nginx/nginx.conf, workbench.deploy.nginx)
    deploy.add_argument("--nginx-replicas", default=",".join(DEFAULT_REPLICAS),
                        help="comma-separated HOST:HTTP_PORT[:GRPC_PORT] of the workbench serve "
                             "replicas behind nginx (gRPC port default HTTP_PORT+1; default "
                             "%(default)s)")
    deploy.add_argument("--no-models", action="store_true",
                        help="write the files only, do not copy the repository into OUT/models")
    # the image: its base, and local wheels it installs from (the workbench wheel, a CPU torch)
    deploy.add_argument("--base-image", default=defaults.python_image,
                        help="the Dockerfile's FROM: any image with python3 and its venv module "
                             f"(default {defaults.python_image})")
    deploy.add_argument("--wheel", action="append", default=[], metavar="FILE",
                        help="a wheel copied into OUT/wheels, which the image installs from "
                             "first (repeatable; e.g. the workbench wheel, a local torch+cpu wheel)")


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Write the deployment and print the paths written, then a warning (stderr) per import
    of a Python-backend model that nothing installed here provides; returns 0 (a bad value or
    an unwritable folder exits through ``parser.error``)."""
    try:
        spec = DeploySpec(
            name=args.name, image=args.image, model_control_mode=args.model_control_mode,
            http_port=args.http_port, grpc_port=args.grpc_port, metrics_port=args.metrics_port,
            replicas=args.replicas, min_replicas=args.min_replicas, max_replicas=args.max_replicas,
            exit_timeout_s=args.exit_timeout_secs, queue_time_target_us=args.queue_time_target_us,
            shm_size=args.shm_size, api_key_secret=args.api_key_secret,
            restricted_api=tuple(g.strip() for g in args.restricted_api.split(",") if g.strip()),
            **_alert_fields(args),
            python_image=args.base_image,
        )
        nginx = NginxSpec(replicas=tuple(Replica.parse(r) for r in args.nginx_replicas.split(",")
                                         if r.strip()), http_port=spec.http_port,
                          grpc_port=spec.grpc_port)
        repository, out = check_folders(Path(args.model_repository), Path(args.out))
        requirements = python_requirements(repository)
        written = write_deployment(spec, repository, out, copy_models=not args.no_models,
                                   requirements=requirements, nginx=nginx,
                                   wheels=[Path(wheel) for wheel in args.wheel])
    except (ValueError, OSError) as exc:
        parser.error(str(exc))
    for path in written:
        print(path)
    for warning in requirements.warnings:
        print(f"workbench deploy: warning: {warning}", file=sys.stderr)
    return 0


def _alert_fields(args: argparse.Namespace) -> dict:
    """The alert thresholds of :class:`DeploySpec` from the ``--alert-*`` flags."""
    return {"alert_error_rate": args.alert_error_rate,
            "alert_p99_latency_us": args.alert_p99_latency_us,
            "alert_queue_time_us": args.alert_queue_time_us,
            "alert_pending_requests": args.alert_pending_requests,
            "alert_gpu_memory_fraction": args.alert_gpu_memory_fraction,
            "alert_matchers": args.alert_matchers}


__all__ = ["add_parser", "run"]
