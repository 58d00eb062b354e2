"""Kubernetes manifests for a ``workbench serve`` replica set: Deployment, Service, HPA, and
the Prometheus adapter rule the HPA's queue-time metric assumes.

Assumptions (also written into the generated README):

* Prometheus scrapes the pods through the ``prometheus.io/*`` annotations (the usual
  ``kubernetes-pods`` job), keeping ``namespace`` and ``pod`` labels on the series.
* prometheus-adapter serves the custom metrics API with the rule of
  :func:`adapter_rules`: the mean queue time per request over the last minute,
  ``rate(nv_inference_queue_duration_us) / rate(nv_inference_request_success)``, in
  **microseconds**, per pod, named ``nv_inference_queue_duration_us_per_request``.
  ``nv_inference_queue_duration_us`` is Triton's cumulative queue time counter (µs), which
  the workbench exports under Triton's name.
"""

from __future__ import annotations

from workbench.deploy.spec import DeploySpec

#: the custom metric the HPA scales on (see :func:`adapter_rules`)
QUEUE_METRIC = "nv_inference_queue_duration_us_per_request"


def _labels(spec: DeploySpec) -> dict[str, str]:
    return {"app.kubernetes.io/name": spec.name, "app.kubernetes.io/part-of": "workbench"}


def _probe(path: str, port: str, period_s: int, failures: int) -> dict:
    return {"httpGet": {"path": path, "port": port}, "periodSeconds": period_s,
            "timeoutSeconds": 2, "failureThreshold": failures}


def _resources(spec: DeploySpec) -> dict:
    limits = {k: v for k, v in (("cpu", spec.cpu_limit), ("memory", spec.memory_limit)) if v}
    resources: dict = {"requests": {"cpu": spec.cpu_request, "memory": spec.memory_request}}
    if limits:
        resources["limits"] = limits
    return resources


#: the container's environment variable holding the API key (from the Secret)
API_KEY_ENV = "WORKBENCH_API_KEY"


def _container(spec: DeploySpec) -> dict:
    key_env = [{"name": API_KEY_ENV, "valueFrom": {"secretKeyRef": {
        "name": spec.secret_name, "key": "api-key"}}}] if spec.restricted_api else []
    return {
        "name": "workbench",
        "image": spec.image,
        "args": spec.serve_args() + spec.restriction_args(f"$({API_KEY_ENV})"),
        **({"env": key_env} if key_env else {}),
        "ports": [
            {"name": "http", "containerPort": spec.http_port, "protocol": "TCP"},
            {"name": "grpc", "containerPort": spec.grpc_port, "protocol": "TCP"},
            {"name": "metrics", "containerPort": spec.metrics_port, "protocol": "TCP"},
        ],
        # models load before the server is live: give loading up to 5 minutes
        "startupProbe": _probe("/v2/health/live", "http", 5, 60),
        "livenessProbe": _probe("/v2/health/live", "http", 10, 3),
        # not ready while stopping (draining) or when a model failed to load (strict readiness)
        "readinessProbe": _probe("/v2/health/ready", "http", 5, 3),
        "resources": _resources(spec),
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
    }


def deployment(spec: DeploySpec) -> dict:
    """The Deployment: probes on ``/v2/health/live|ready``, a memory-backed ``/dev/shm``,
    Prometheus scrape annotations on the pods, a grace period past the server's exit
    timeout so in-flight requests drain, and the ``restricted_api`` groups behind the key of
    the Secret ``spec.secret_name`` (key ``api-key``, as ``$(WORKBENCH_API_KEY)``)."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": spec.name, "labels": _labels(spec)},
        "spec": {
            "replicas": spec.replicas,
            "selector": {"matchLabels": _labels(spec)},
            "template": {
                "metadata": {
                    "labels": _labels(spec),
                    "annotations": {
                        "prometheus.io/scrape": "true",
                        "prometheus.io/port": str(spec.metrics_port),
                        "prometheus.io/path": "/metrics",
                    },
                },
                "spec": {
                    "terminationGracePeriodSeconds": spec.exit_timeout_s + 10,
                    "containers": [_container(spec)],
                    "volumes": [{"name": "dshm",
                                 "emptyDir": {"medium": "Memory", "sizeLimit": spec.shm_size}}],
                },
            },
        },
    }


def service(spec: DeploySpec) -> dict:
    """A ClusterIP Service for HTTP (8000), gRPC (8001) and metrics (8002)."""
    ports = [("http", spec.http_port), ("grpc", spec.grpc_port), ("metrics", spec.metrics_port)]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": spec.name, "labels": _labels(spec)},
        "spec": {
            "type": "ClusterIP",
            "selector": _labels(spec),
            "ports": [{"name": name, "port": port, "targetPort": name, "protocol": "TCP",
                       **({"appProtocol": "grpc"} if name == "grpc" else {})}
                      for name, port in ports],
        },
    }


def autoscaler(spec: DeploySpec) -> dict:
    """An ``autoscaling/v2`` HPA on the mean queue time per request of the pods (custom
    metric :data:`QUEUE_METRIC`, µs), target ``spec.queue_time_target_us``. Scale-down waits
    five minutes of low queue time (a replica's models take a while to load back)."""
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": spec.name, "labels": _labels(spec)},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": spec.name},
            "minReplicas": spec.min_replicas,
            "maxReplicas": spec.max_replicas,
            "metrics": [{
                "type": "Pods",
                "pods": {
                    "metric": {"name": QUEUE_METRIC},
                    "target": {"type": "AverageValue",
                               "averageValue": str(spec.queue_time_target_us)},
                },
            }],
            "behavior": {"scaleDown": {"stabilizationWindowSeconds": 300}},
        },
    }


def adapter_rules() -> dict:
    """The prometheus-adapter rule (its ``rules:`` config) that turns Triton's cumulative
    ``nv_inference_queue_duration_us`` into :data:`QUEUE_METRIC`: queue µs per successful
    request over the last minute, per pod (0 without traffic)."""
    matchers = "<<.LabelMatchers>>"
    return {
        "rules": [{
            "seriesQuery": 'nv_inference_queue_duration_us{namespace!="",pod!=""}',
            "resources": {"overrides": {"namespace": {"resource": "namespace"},
                                        "pod": {"resource": "pod"}}},
            "name": {"matches": "^nv_inference_queue_duration_us$", "as": QUEUE_METRIC},
            "metricsQuery": (
                f"sum(rate(nv_inference_queue_duration_us{{{matchers}}}[1m])) by (<<.GroupBy>>)"
                f" / clamp_min(sum(rate(nv_inference_request_success{{{matchers}}}[1m]))"
                " by (<<.GroupBy>>), 0.001)"
            ),
        }],
    }


__all__ = ["API_KEY_ENV", "QUEUE_METRIC", "adapter_rules", "autoscaler", "deployment", "service"]
