"""What a deployment of one model repository looks like: :class:`DeploySpec`."""

from __future__ import annotations

import re
from dataclasses import dataclass

from workbench.startup.restrictions import CATEGORIES, restriction_value

#: a DNS-1035 label: what Kubernetes accepts as a Service name (starts with a letter)
_DNS_1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
#: a DNS-1123 subdomain (at most 253 characters): what Kubernetes accepts as a Secret name
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
#: a Kubernetes quantity such as 1Gi, 512Mi, 500m, 2
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|Ki|Mi|Gi|Ti)?$")


@dataclass(frozen=True)
class DeploySpec:
    """The knobs of the generated Dockerfile and Kubernetes manifests.

    Attributes:
        name: Deployment, Service and HPA name, and the ``app`` label (a DNS-1035 label, as
            Kubernetes requires of a Service name: it starts with a letter).
        image: the container image the Deployment runs (built from the generated Dockerfile).
        model_control_mode: ``none`` (load everything at start: the production default) or
            ``explicit`` / ``poll``, passed to ``workbench serve``.
        http_port, grpc_port, metrics_port: container and Service ports (tritonserver's
            8000 / 8001 / 8002).
        replicas: initial replicas; the HPA scales between ``min_replicas`` and
            ``max_replicas``.
        queue_time_target_us: the HPA's target for the mean queue time per request,
            **microseconds** (the custom metric ``nv_inference_queue_duration_us_per_request``
            that the Prometheus adapter rule in ``prometheus-adapter-rules.yaml`` computes).
        shm_size: size limit of the memory-backed ``/dev/shm`` volume (a Kubernetes quantity,
            e.g. ``1Gi``): Python-backend stubs and shared-memory clients need more than the
            container runtime's 64 MiB default.
        cpu_request, memory_request, cpu_limit, memory_limit: container resources (Kubernetes
            quantities; the limits may be "" for none).
        exit_timeout_s: ``--exit-timeout-secs``, seconds a stopping server waits for in-flight
            requests; the pod's termination grace period is 10 s longer.
        python_image: base image of the Dockerfile.
        restricted_api: Triton API groups (``--http-restricted-api`` /
            ``--grpc-restricted-protocol``) that need the API key in the Kubernetes
            Deployment; default ``model-repository`` (index, load, unload); empty = none;
            never ``health`` (the probes).
        api_key_header: the header carrying the key (gRPC: ``triton-grpc-protocol-<header>``).
        api_key_secret: the Kubernetes Secret (key ``api-key``) the key comes from; default
            ``<name>-api-key``. The manifests never contain the key itself.
        alert_error_rate, alert_p99_latency_us, alert_queue_time_us, alert_pending_requests,
            alert_gpu_memory_fraction, alert_matchers: the thresholds of the Prometheus alert
            rules (:mod:`workbench.deploy.alerts`): failed fraction of the requests (0..1),
            p99 request latency and mean queue time (**microseconds**), pending requests,
            used fraction of GPU memory (0..1); ``alert_matchers`` the PromQL label matchers
            that select this deployment's series (default ``job="<name>"``, see
            :attr:`alert_selector`).
    """

    name: str = "workbench"
    image: str = "workbench-models:latest"
    model_control_mode: str = "none"
    http_port: int = 8000
    grpc_port: int = 8001
    metrics_port: int = 8002
    replicas: int = 1
    min_replicas: int = 1
    max_replicas: int = 4
    queue_time_target_us: int = 5000
    shm_size: str = "1Gi"
    cpu_request: str = "1"
    memory_request: str = "2Gi"
    cpu_limit: str = ""
    memory_limit: str = "4Gi"
    exit_timeout_s: int = 30
    python_image: str = "python:3.12-slim"
    restricted_api: tuple[str, ...] = ("model-repository",)
    api_key_header: str = "workbench-api-key"
    api_key_secret: str = ""
    # the Prometheus alert rules' thresholds (workbench/deploy/alerts.py)
    alert_error_rate: float = 0.05
    alert_p99_latency_us: int = 500_000
    alert_queue_time_us: int = 50_000
    alert_pending_requests: int = 10
    alert_gpu_memory_fraction: float = 0.9
    alert_matchers: str = ""

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """Raises:
            ValueError: a name Kubernetes would refuse (as the Service's), a port outside
                1..65535 or repeated, replica bounds out of order, a target or timeout below
                1, a malformed quantity, an unknown model control mode, a Secret name
                Kubernetes would refuse, or ``health`` among the restricted groups (the
                probes carry no key).
        """
        if not _DNS_1035_LABEL.match(self.name):
            raise ValueError(f"name '{self.name}' is not a DNS-1035 label (the Service's name: a "
                             "DNS-1123 label that starts with a letter; lower case letters, "
                             "digits and '-', at most 63)")
        ports = (self.http_port, self.grpc_port, self.metrics_port)
        if any(not 1 <= p <= 65535 for p in ports) or len(set(ports)) != 3:
            raise ValueError(f"ports must be three different numbers in 1..65535, got {ports}")
        if not 1 <= self.min_replicas <= self.replicas <= self.max_replicas:
            raise ValueError("replicas must satisfy 1 <= min_replicas <= replicas <= max_replicas, "
                             f"got {self.min_replicas}, {self.replicas}, {self.max_replicas}")
        if self.queue_time_target_us < 1 or self.exit_timeout_s < 1:
            raise ValueError("queue_time_target_us and exit_timeout_s must be at least 1")
        for field in ("shm_size", "cpu_request", "memory_request", "cpu_limit", "memory_limit"):
            value = getattr(self, field)
            if (value or field.endswith("request") or field == "shm_size") \
                    and not _QUANTITY.match(value):
                raise ValueError(f"{field} '{value}' is not a Kubernetes quantity (e.g. 1Gi, 500m)")
        unknown = [group for group in self.restricted_api if group not in CATEGORIES]
        if unknown:
            raise ValueError(f"unknown restricted api {unknown} (known: {', '.join(CATEGORIES)})")
        if not _DNS_SUBDOMAIN.match(self.secret_name) or len(self.secret_name) > 253:
            raise ValueError(f"api_key_secret '{self.secret_name}' is not a DNS-1123 subdomain "
                             "(lower case letters, digits, '-' and '.', at most 253)")
        if "health" in self.restricted_api:
            raise ValueError("the health API group cannot be restricted: the kubelet's readiness, "
                             "liveness and startup probes GET /v2/health/* without the API key")
        self._check_alerts()
        if self.model_control_mode not in ("none", "explicit", "poll"):
            raise ValueError(f"model_control_mode must be none, explicit or poll, "
                             f"got '{self.model_control_mode}'")

    def _check_alerts(self) -> None:
        if not (0 < self.alert_error_rate < 1 and 0 < self.alert_gpu_memory_fraction < 1):
            raise ValueError("alert_error_rate and alert_gpu_memory_fraction must be between 0 "
                             f"and 1, got {self.alert_error_rate}, {self.alert_gpu_memory_fraction}")
        if min(self.alert_p99_latency_us, self.alert_queue_time_us, self.alert_pending_requests) < 1:
            raise ValueError("alert_p99_latency_us, alert_queue_time_us and alert_pending_requests "
                             "must be at least 1")
        if any(c in self.alert_matchers for c in "{}\n"):
            raise ValueError(f"alert_matchers '{self.alert_matchers}' must be label matchers "
                             'without braces, e.g. job="workbench"')

    @property
    def alert_selector(self) -> str:
        """The label matchers of the alert rules' series: ``alert_matchers`` or
        ``job="<name>"`` (the job a ``ServiceMonitor`` of the Service gets)."""
        return self.alert_matchers or f'job="{self.name}"'

    def serve_args(self) -> list[str]:
        """The ``workbench serve`` flags of the container (the repository is ``/models``;
        the latency summaries on, for the p99 alert and dashboard panels, and the workbench
        histograms, for the dashboard's histogram panels)."""
        args = ["--model-repository=/models", f"--model-control-mode={self.model_control_mode}",
                f"--http-port={self.http_port}", f"--grpc-port={self.grpc_port}",
                f"--metrics-port={self.metrics_port}", f"--exit-timeout-secs={self.exit_timeout_s}"]
        if self.model_control_mode == "explicit":
            args.append("--load-model=*")
        # the p99 of the alert rules and the dashboard: Triton's request latency summary;
        # the dashboard's histogram panels: the duration and batch-size histograms (beyond Triton)
        args.append("--metrics-config=summary_latencies=true")
        args.append("--metrics-config=workbench_histograms=true")
        return args

    @property
    def secret_name(self) -> str:
        """The Secret holding the API key (``api_key_secret`` or ``<name>-api-key``)."""
        return self.api_key_secret or f"{self.name}-api-key"

    def restriction_args(self, key_reference: str) -> list[str]:
        """``--http-restricted-api`` / ``--grpc-restricted-protocol`` flags restricting
        :attr:`restricted_api` to ``key_reference`` (in the Deployment ``$(WORKBENCH_API_KEY)``,
        which Kubernetes expands from the container's environment); [] when none."""
        if not self.restricted_api:
            return []
        value = restriction_value(self.restricted_api, self.api_key_header, key_reference)
        return [f"--http-restricted-api={value}", f"--grpc-restricted-protocol={value}"]


__all__ = ["DeploySpec"]
