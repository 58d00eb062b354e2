"""Kubernetes manifests for a ``workbench serve`` replica set: Deployment, Service, HPA,
PodDisruptionBudget, the Prometheus operator's ServiceMonitor, and the Prometheus adapter rule
the HPA's queue-time metric assumes.

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
#: the HPA's second metric: mean CPU use of the pods, percent of their CPU request
CPU_TARGET_PERCENT = 80
#: how often the ServiceMonitor has Prometheus scrape each pod
SCRAPE_INTERVAL = "15s"


def _labels(spec: DeploySpec) -> dict[str, str]:
    return {"app.kubernetes.io/name": spec.name, "app.kubernetes.io/part-of": "workbench"}


def http_probe(path: str, port: str, period_s: int, failures: int) -> dict:
    """A probe GETting ``path`` on the named container ``port`` every ``period_s`` seconds,
    2 s timeout, failing after ``failures`` misses in a row."""
    return {"httpGet": {"path": path, "port": port}, "periodSeconds": period_s,
            "timeoutSeconds": 2, "failureThreshold": failures}


def container_resources(spec: DeploySpec) -> dict:
    """The container's ``resources``: requests always, limits where ``spec`` sets them."""
    limits = {k: v for k, v in (("cpu", spec.cpu_limit), ("memory", spec.memory_limit)) if v}
    resources: dict = {"requests": {"cpu": spec.cpu_request, "memory": spec.memory_request}}
    if limits:
        resources["limits"] = limits
    return resources


#: the container's environment variable holding the API key (from the Secret)
API_KEY_ENV = "WORKBENCH_API_KEY"


def api_key_env(spec: DeploySpec) -> list[dict]:
    """The container's ``env``: :data:`API_KEY_ENV` from the key ``api-key`` of the Secret
    ``spec.secret_name`` when an API group is restricted, else []."""
    return [{"name": API_KEY_ENV, "valueFrom": {"secretKeyRef": {
        "name": spec.secret_name, "key": "api-key"}}}] if spec.restricted_api else []


def _container(spec: DeploySpec) -> dict:
    key_env = api_key_env(spec)
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
        "startupProbe": http_probe("/v2/health/live", "http", 5, 60),
        "livenessProbe": http_probe("/v2/health/live", "http", 10, 3),
        # not ready while stopping (draining) or when a model failed to load (strict readiness)
        "readinessProbe": http_probe("/v2/health/ready", "http", 5, 3),
        "resources": container_resources(spec),
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
    metric :data:`QUEUE_METRIC`, µs), target ``spec.queue_time_target_us``, and on their CPU
    use (:data:`CPU_TARGET_PERCENT` % of the request): the HPA takes the larger replica count
    of the two, so CPU still scales the set where prometheus-adapter is missing. Scale-down
    waits five minutes of low load (a replica's models take a while to load back)."""
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
            }, {
                "type": "Resource",
                "resource": {"name": "cpu", "target": {
                    "type": "Utilization", "averageUtilization": CPU_TARGET_PERCENT}},
            }],
            "behavior": {"scaleDown": {"stabilizationWindowSeconds": 300}},
        },
    }


def disruption_budget(spec: DeploySpec) -> dict:
    """A ``policy/v1`` PodDisruptionBudget: voluntary disruptions (node drains, cluster
    upgrades) evict at most one replica at a time. ``maxUnavailable`` rather than
    ``minAvailable``: with a single replica a drain can still proceed (the Service then has
    no endpoint until the new pod is ready)."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": spec.name, "labels": _labels(spec)},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": _labels(spec)}},
    }


def service_monitor(spec: DeploySpec) -> dict:
    """The Prometheus operator's ``monitoring.coreos.com/v1`` ServiceMonitor: Prometheus
    scrapes ``/metrics`` on the Service's ``metrics`` port of every pod behind it, every
    :data:`SCRAPE_INTERVAL`, with the ``namespace`` and ``pod`` target labels the adapter rule
    of :func:`adapter_rules` groups by (the operator adds both). For clusters without the
    operator, the pods' ``prometheus.io/*`` annotations do the same."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": {"name": spec.name, "labels": _labels(spec)},
        "spec": {
            "selector": {"matchLabels": _labels(spec)},
            "endpoints": [{"port": "metrics", "path": "/metrics", "interval": SCRAPE_INTERVAL}],
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


__all__ = ["API_KEY_ENV", "CPU_TARGET_PERCENT", "QUEUE_METRIC", "SCRAPE_INTERVAL", "adapter_rules",
           "api_key_env", "autoscaler", "container_resources", "deployment", "disruption_budget",
           "http_probe", "service", "service_monitor"]
