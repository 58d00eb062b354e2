"""The Serve application: :func:`build_app` from :class:`ServerOptions` and the scaling
settings; :func:`app`, the builder ``serve run workbench.ray:app key=value ...`` calls."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any

from ray import serve

from workbench import ServerOptions
from workbench.ray.replica import ingress_class
from workbench.ray.scaling import DEPLOYMENT, Scaling


def absolute_repositories(options: ServerOptions) -> ServerOptions:
    """Local repository paths made absolute (replicas run in other working directories);
    remote URLs (``s3://``, ``gs://``, ``as://``...) unchanged."""
    paths = [path if "://" in path else str(Path(path).resolve()) for path in options.model_repository]
    return options.model_copy(update={"model_repository": paths})


def build_app(options: ServerOptions, scaling: Scaling | None = None) -> Any:
    """The bound Serve application: one deployment, :data:`DEPLOYMENT`, of engine replicas.

    With ``max_replicas > min_replicas`` Serve autoscales it with
    :class:`workbench.ray.autoscaling.QueueTimePolicy`. Serve waits up to
    ``--exit-timeout-secs`` for a stopping replica's requests in flight (Triton's drain time).
    """
    scaling = scaling or Scaling()
    options = absolute_repositories(options)
    config: dict[str, Any] = {
        "name": DEPLOYMENT,
        "max_ongoing_requests": scaling.max_ongoing_requests,
        "graceful_shutdown_timeout_s": options.exit_timeout_secs,
        "graceful_shutdown_wait_loop_s": 0.5,
        "ray_actor_options": {"num_cpus": scaling.replica_cpus},
    }
    if scaling.max_replicas > scaling.min_replicas:
        config["autoscaling_config"] = {
            "min_replicas": scaling.min_replicas, "initial_replicas": scaling.min_replicas,
            "max_replicas": scaling.max_replicas, "metrics_interval_s": scaling.metrics_interval_s,
            "look_back_period_s": max(2 * scaling.metrics_interval_s, 2.0),
            "upscale_delay_s": 0.0, "downscale_delay_s": 0.0,
            "policy": {"policy_function": "workbench.ray.autoscaling:QueueTimePolicy",
                       "policy_kwargs": {"target_queue_us": scaling.target_queue_us,
                                         "downscale_delay_s": scaling.downscale_delay_s}},
        }
    else:
        config["num_replicas"] = scaling.min_replicas
    deployment = serve.deployment(**config)(ingress_class())
    return deployment.bind(options.model_dump())


def app(args: dict[str, str]) -> Any:
    """``serve run workbench.ray:app model_repository=PATH [key=value ...]``: each key a
    :class:`ServerOptions` field (``model_control_mode=poll``, ...) or a :class:`Scaling`
    one (``max_replicas=4``); a list field takes a comma-separated value."""
    scaling_names = {f.name for f in fields(Scaling)}
    numbers: dict[str, Any] = {k: float(v) if "." in v else int(v) for k, v in args.items() if k in scaling_names}
    scaling = Scaling(**numbers)
    given: dict[str, Any] = {k: v for k, v in args.items() if k not in scaling_names}
    for name, value in given.items():
        if ServerOptions.model_fields[name].annotation is not None and "list" in str(
                ServerOptions.model_fields[name].annotation):
            given[name] = value.split(",")
    return build_app(ServerOptions(**given), scaling)
