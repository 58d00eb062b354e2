"""KServe manifests for the workbench image: a ``ServingRuntime`` (``serving.kserve.io/v1alpha1``)
that runs ``workbench serve`` on the repository baked into the image, and an
``InferenceService`` (``serving.kserve.io/v1beta1``) whose predictor uses it over the Open
Inference (v2) protocol.

KServe's conventions, as its own Triton runtime (``kserve-tritonserver``) follows them: the
container is named ``kserve-container``, serves HTTP on 8080 and gRPC on 9000 (the only port a
Knative revision exposes is the HTTP one), the runtime lists ``protocolVersions: [v2, grpc-v2]``
and the model formats it serves; a Triton model repository is the format ``triton``, version
``2``. The image already holds the repository at ``/models``, so the predictor has no
``storageUri`` (KServe then runs no storage initializer).
"""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.deploy.kubernetes import (
    API_KEY_ENV,
    api_key_env,
    container_resources,
    http_probe,
)
from workbench.deploy.spec import DeploySpec

#: the ports KServe expects a runtime's container to serve (HTTP, gRPC)
KSERVE_HTTP_PORT = 8080
KSERVE_GRPC_PORT = 9000
#: the model format of a whole Triton model repository, as KServe's Triton runtime names it
TRITON_FORMAT = {"name": "triton", "version": "2"}
#: KServe's names (and versions, as its Triton runtime lists them) of the formats of the
#: workbench's backends; Python-backend models, DALI pipelines (KServe names no DALI format)
#: and ensembles are only ``triton``, and so are fil models: KServe's ``xgboost`` / ``lightgbm``
#: formats are its own servers' layouts (a bare model file), which KServe's Triton runtime does
#: not list either
_FORMATS = {
    "onnx": {"name": "onnx", "version": "1"},
    "pytorch": {"name": "pytorch", "version": "1"},
    "openvino": {"name": "openvino"},
    "tensorflow": {"name": "tensorflow", "version": "2"},
}


def _model_format(config: ModelConfig, files: set[str]) -> str | None:
    if config.platform == "onnxruntime_onnx" or config.backend == "onnxruntime" \
            or "model.onnx" in files:
        return "onnx"
    if config.platform == "pytorch_libtorch" or config.backend == "pytorch" or "model.pt" in files:
        return "pytorch"
    if config.backend == "openvino" or "model.xml" in files:
        return "openvino"
    if config.platform == "tensorflow_savedmodel" or config.backend == "tensorflow" \
            or "model.savedmodel" in files:
        return "tensorflow"
    return None


def model_formats(repository: Path) -> list[dict]:
    """The ``supportedModelFormats`` of the runtime for ``repository``: ``triton`` v2 (the
    repository itself, auto-selected) first, then KServe's name for each backend format its
    models hold (``onnx``, ``pytorch``, ``openvino``, ``tensorflow``; from ``config.pbtxt``'s platform or
    backend, else the model files), sorted. A missing or unreadable config leaves it to the
    files."""
    found = set()
    for folder in sorted(p for p in Path(repository).iterdir() if p.is_dir()):
        config = ModelConfig()
        with contextlib.suppress(OSError, UnicodeDecodeError, text_format.ParseError):
            text_format.Parse((folder / "config.pbtxt").read_text(encoding="utf-8"), config)
        kind = _model_format(config, {p.name for p in folder.glob("*/*")})
        if kind:
            found.add(kind)
    return [{**TRITON_FORMAT, "autoSelect": True, "priority": 1}] + [
        dict(_FORMATS[kind]) for kind in sorted(found)]


def _runtime_spec(spec: DeploySpec) -> DeploySpec:
    # KServe's ports; metrics stays where Prometheus expects it
    if spec.metrics_port in (KSERVE_HTTP_PORT, KSERVE_GRPC_PORT):
        raise ValueError(f"metrics port {spec.metrics_port} is one of the ports KServe gives the "
                         f"runtime (HTTP {KSERVE_HTTP_PORT}, gRPC {KSERVE_GRPC_PORT}): choose "
                         "another --metrics-port")
    return dataclasses.replace(spec, http_port=KSERVE_HTTP_PORT, grpc_port=KSERVE_GRPC_PORT)


def serving_runtime(spec: DeploySpec, repository: Path) -> dict:
    """The ServingRuntime ``spec.name``: one ``kserve-container`` running ``spec.image`` with
    ``workbench serve`` on ``/models`` (HTTP 8080, gRPC 9000, metrics ``spec.metrics_port``,
    scraped through KServe's ``prometheus.kserve.io/*`` annotations), the formats of
    :func:`model_formats`, readiness on ``/v2/health/ready`` and liveness on
    ``/v2/health/live``, a memory-backed ``/dev/shm`` of ``spec.shm_size``, and the restricted
    API groups behind the Secret's key as in the Deployment.

    Raises:
        ValueError: ``spec.metrics_port`` is 8080 or 9000 (KServe's HTTP / gRPC ports).
    """
    runtime = _runtime_spec(spec)
    key_env = api_key_env(spec)
    container = {
        "name": "kserve-container",
        "image": spec.image,
        "args": runtime.serve_args() + spec.restriction_args(f"$({API_KEY_ENV})"),
        **({"env": key_env} if key_env else {}),
        "ports": [{"name": "http1", "containerPort": KSERVE_HTTP_PORT, "protocol": "TCP"}],
        "readinessProbe": http_probe("/v2/health/ready", "http1", 5, 3),
        # no startupProbe (Knative refuses it): liveness allows 5 minutes of model loading
        "livenessProbe": {**http_probe("/v2/health/live", "http1", 10, 3),
                          "initialDelaySeconds": 300},
        "resources": container_resources(spec),
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
    }
    return {
        "apiVersion": "serving.kserve.io/v1alpha1",
        "kind": "ServingRuntime",
        "metadata": {"name": spec.name, "labels": {"app.kubernetes.io/part-of": "workbench"}},
        "spec": {
            "annotations": {"prometheus.kserve.io/port": str(spec.metrics_port),
                            "prometheus.kserve.io/path": "/metrics"},
            "supportedModelFormats": model_formats(repository),
            "protocolVersions": ["v2", "grpc-v2"],
            "multiModel": False,
            "containers": [container],
            "volumes": [{"name": "dshm",
                         "emptyDir": {"medium": "Memory", "sizeLimit": spec.shm_size}}],
        },
    }


def inference_service(spec: DeploySpec) -> dict:
    """The InferenceService ``spec.name``: a predictor on the ServingRuntime of
    :func:`serving_runtime` (format ``triton`` v2, ``protocolVersion: v2``), between
    ``spec.min_replicas`` and ``spec.max_replicas`` replicas."""
    return {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": spec.name, "labels": {"app.kubernetes.io/part-of": "workbench"}},
        "spec": {"predictor": {
            "minReplicas": spec.min_replicas,
            "maxReplicas": spec.max_replicas,
            "model": {"modelFormat": dict(TRITON_FORMAT), "runtime": spec.name,
                      "protocolVersion": "v2"},
        }},
    }


__all__ = ["KSERVE_GRPC_PORT", "KSERVE_HTTP_PORT", "TRITON_FORMAT", "inference_service",
           "model_formats", "serving_runtime"]
