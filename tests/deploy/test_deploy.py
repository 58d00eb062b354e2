"""``workbench deploy``: Dockerfile and Kubernetes manifests for a model repository, parsed back
with PyYAML; the CLI writes them with a copy of the repository."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from workbench.deploy import DeploySpec, render, required_extras
from workbench.deploy.dockerfile import docker_shm_size
from workbench.deploy.yaml_text import dump, dump_all
from workbench.hosts.cli import build_parser, main, options_from_args
from workbench.testing.reload import write_add_sub


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    repo = tmp_path / "models"
    write_add_sub(repo)
    (repo / "add_sub" / "config.pbtxt.bak").write_text("old")  # never goes into the image
    return repo


def manifests(repository: Path, **spec) -> dict[str, dict]:
    files = render(DeploySpec(**spec), repository)
    return {path: yaml.safe_load(text) for path, text in files.items() if path.endswith(".yaml")}


def test_yaml_writer_output_reads_back_identically() -> None:
    document = {"a": "true", "b": "8000", "c": 8000, "d": True, "e": None, "f": "x: y # z",
                "g": [{"h": 1, "i": [1, "2"]}, [3, 4], {}], "j": [], "µ": "1 µs", "on": "off",
                "k": {"l": {"m": -1.5}}, "prometheus.io/scrape": "true"}
    assert yaml.safe_load(dump(document)) == document
    assert list(yaml.safe_load_all(dump_all([{"a": 1}, {"b": 2}]))) == [{"a": 1}, {"b": 2}]
    with pytest.raises(TypeError):
        dump({"a": object()})


def test_deployment_probes_shm_and_scrape_annotations(repository: Path) -> None:
    deployment = manifests(repository, name="digits", image="reg/digits:1")["k8s/deployment.yaml"]
    assert (deployment["kind"], deployment["metadata"]["name"]) == ("Deployment", "digits")
    pod = deployment["spec"]["template"]
    assert pod["metadata"]["annotations"] == {"prometheus.io/scrape": "true",
                                              "prometheus.io/port": "8002",
                                              "prometheus.io/path": "/metrics"}
    assert deployment["spec"]["selector"]["matchLabels"] == pod["metadata"]["labels"]
    [container] = pod["spec"]["containers"]
    assert container["image"] == "reg/digits:1"
    assert container["readinessProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": "http"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/v2/health/live", "port": "http"}
    assert container["startupProbe"]["httpGet"]["path"] == "/v2/health/live"
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {
        "http": 8000, "grpc": 8001, "metrics": 8002}
    assert "--model-repository=/models" in container["args"]
    assert container["volumeMounts"] == [{"name": "dshm", "mountPath": "/dev/shm"}]
    assert pod["spec"]["volumes"] == [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}}]
    assert pod["spec"]["terminationGracePeriodSeconds"] == 40  # exit timeout 30 s + 10


def test_service_and_hpa_on_queue_time(repository: Path) -> None:
    files = manifests(repository, http_port=9000, queue_time_target_us=2500, max_replicas=7)
    service = files["k8s/service.yaml"]
    assert {p["name"]: (p["port"], p["targetPort"]) for p in service["spec"]["ports"]} == {
        "http": (9000, "http"), "grpc": (8001, "grpc"), "metrics": (8002, "metrics")}
    hpa = files["k8s/hpa.yaml"]
    assert hpa["apiVersion"] == "autoscaling/v2" and hpa["spec"]["maxReplicas"] == 7
    assert hpa["spec"]["scaleTargetRef"]["name"] == "workbench"
    metric, cpu = hpa["spec"]["metrics"]  # queue time, and CPU (tests/deploy/test_deploy_kubernetes.py)
    assert cpu["resource"]["name"] == "cpu"
    assert metric["pods"]["metric"]["name"] == "nv_inference_queue_duration_us_per_request"
    assert metric["pods"]["target"] == {"type": "AverageValue", "averageValue": "2500"}
    [rule] = files["k8s/prometheus-adapter-rules.yaml"]["rules"]
    assert rule["name"]["as"] == "nv_inference_queue_duration_us_per_request"
    assert "rate(nv_inference_queue_duration_us{" in rule["metricsQuery"]
    assert "rate(nv_inference_request_success{" in rule["metricsQuery"]


def test_dockerfile_serves_the_copied_repository(repository: Path) -> None:
    text = render(DeploySpec(model_control_mode="explicit"), repository)["Dockerfile"]
    assert "COPY --chown=workbench:workbench models/ /models/" in text
    assert 'ENTRYPOINT ["workbench", "serve"]' in text
    assert '"--model-control-mode=explicit"' in text and '"--load-model=*"' in text
    assert "EXPOSE 8000 8001 8002" in text
    # the wheel in wheels/ itself, never the name: PyPI's "workbench" is another project
    # (0.8.x), which `pip install --find-links /tmp/wheels workbench` took as the newer version
    assert 'wheel=$(ls -v /tmp/wheels/workbench-*.whl | tail -n 1)' in text
    assert 'pip install --find-links /tmp/wheels "$wheel"' in text  # add_sub: no extra
    assert not re.search(r'pip install[^\n]*"workbench', text)


def test_extras_follow_the_models_backends(tmp_path: Path, repository: Path) -> None:
    assert required_extras(repository) == []
    (repository / "scripted" / "1").mkdir(parents=True)
    (repository / "scripted" / "1" / "model.pt").write_bytes(b"")
    (repository / "vino").mkdir()
    (repository / "vino" / "config.pbtxt").write_text('backend: "openvino"\n')
    assert required_extras(repository) == ["openvino", "pytorch"]
    assert '"$wheel[openvino,pytorch]"' in render(DeploySpec(), repository)["Dockerfile"]
    (repository / "trees").mkdir()
    (repository / "trees" / "config.pbtxt").write_text('backend: "fil"\n')
    assert required_extras(repository) == ["fil", "openvino", "pytorch"]
    (repository / "saved" / "1" / "model.savedmodel").mkdir(parents=True)
    assert required_extras(repository) == ["fil", "openvino", "pytorch", "tensorflow"]
    (repository / "preprocess" / "1").mkdir(parents=True)
    (repository / "preprocess" / "1" / "model.dali").write_bytes(b"")  # a DALI pipeline
    assert required_extras(repository) == ["dali", "fil", "openvino", "pytorch", "tensorflow"]
    assert '"$wheel[dali,fil,openvino,pytorch,tensorflow]"' in render(DeploySpec(), repository)["Dockerfile"]


def test_a_fil_image_installs_the_openmp_runtime_lightgbm_loads(repository: Path) -> None:
    """lightgbm's wheel loads the system's libgomp.so.1: the image of a repository with a fil
    model failed to load cancer_lightgbm ("libgomp.so.1: cannot open shared object file") until
    the Dockerfile installed libgomp1; one without fil models installs nothing."""
    assert "apt-get" not in render(DeploySpec(), repository)["Dockerfile"]
    (repository / "trees").mkdir()
    (repository / "trees" / "config.pbtxt").write_text('backend: "fil"\n')
    text = render(DeploySpec(), repository)["Dockerfile"]
    runtime = text[text.index("COPY --from=build"):]  # the image's stage, as root
    install = runtime.index("apt-get install -y --no-install-recommends libgomp1")
    assert install < runtime.index("USER workbench")


def test_a_config_that_is_not_utf8_leaves_the_extras_to_the_files(repository: Path) -> None:
    """A broken config.pbtxt (here Latin-1 bytes) is read like a missing one, by both scans:
    ``required_extras`` raised UnicodeDecodeError where ``python_requirements`` went on."""
    (repository / "scripted" / "1").mkdir(parents=True)
    (repository / "scripted" / "1" / "model.pt").write_bytes(b"")
    (repository / "scripted" / "config.pbtxt").write_bytes(b'name: "scripted\xe9"\n')
    assert required_extras(repository) == ["pytorch"]
    assert '"$wheel[pytorch]"' in render(DeploySpec(), repository)["Dockerfile"]


def test_cli_writes_the_build_context(tmp_path: Path, repository: Path, capsys) -> None:
    out = tmp_path / "deploy"
    assert main(["deploy", f"--model-repository={repository}", f"--out={out}", "--name=adder",
                 "--replicas=2", "--max-replicas=3"]) == 0
    assert {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()} == {
        "Dockerfile", ".dockerignore", "README.md", "requirements-models.txt", "wheels/README.md",
        "k8s/deployment.yaml",
        "k8s/service.yaml", "k8s/hpa.yaml", "k8s/prometheus-adapter-rules.yaml",
        "k8s/prometheus-rule.yaml", "prometheus/alerts.rules.yml", "prometheus/alerts.test.yml",
        "grafana/dashboard.json",
        "k8s/pdb.yaml", "k8s/servicemonitor.yaml", "k8s/kustomization.yaml",
        "k8s/kserve/servingruntime.yaml", "k8s/kserve/inferenceservice.yaml",
        "overlays/example/kustomization.yaml",
        "nginx/nginx.conf", "nginx/tmp/README.md",
        "models/add_sub/config.pbtxt", "models/add_sub/1/model.onnx"}
    assert (out / "models/add_sub/1/model.onnx").read_bytes() == \
        (repository / "add_sub/1/model.onnx").read_bytes()
    deployment = yaml.safe_load((out / "k8s/deployment.yaml").read_text())
    assert deployment["metadata"]["name"] == "adder" and deployment["spec"]["replicas"] == 2
    assert str(out / "Dockerfile") in capsys.readouterr().out


def test_cli_refuses_bad_values(tmp_path: Path, repository: Path, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["deploy", f"--model-repository={repository}", f"--out={tmp_path / 'o'}",
              "--name=Not_A_Label"])
    assert exit_info.value.code == 2
    assert "DNS-1123" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["deploy", f"--model-repository={repository}", f"--out={repository / 'inside'}"])


@pytest.mark.parametrize("bad", [dict(http_port=8001), dict(min_replicas=3, replicas=2),
                                 dict(shm_size="lots"), dict(queue_time_target_us=0),
                                 dict(model_control_mode="sometimes"), dict(memory_limit="4 GB")])
def test_spec_refuses_what_kubernetes_would(bad: dict) -> None:
    with pytest.raises(ValueError):
        DeploySpec(**bad)


def test_deployment_restricts_the_repository_api_with_a_secret_key(repository: Path) -> None:
    """Kubernetes expands $(WORKBENCH_API_KEY) in args from the env var the Secret fills: the
    expanded args restrict model-repository in both protocols; no key is in any file."""
    [container] = manifests(repository, name="digits")["k8s/deployment.yaml"]["spec"]["template"][
        "spec"]["containers"]
    assert container["env"] == [{"name": "WORKBENCH_API_KEY", "valueFrom": {
        "secretKeyRef": {"name": "digits-api-key", "key": "api-key"}}}]
    expanded = [arg.replace("$(WORKBENCH_API_KEY)", "k3y") for arg in container["args"]]
    options = options_from_args(build_parser().parse_args(["serve", *expanded]))
    assert {g: (r.header, r.value) for g, r in options.http_restrictions().items()} == {
        "model-repository": ("workbench-api-key", "k3y")}
    assert options.grpc_restrictions()["model-repository"].header == "triton-grpc-protocol-workbench-api-key"
    readme = render(DeploySpec(name="digits"), repository)["README.md"]
    assert "kubectl create secret generic digits-api-key" in readme
    open_spec = manifests(repository, name="digits", restricted_api=())["k8s/deployment.yaml"]
    [open_container] = open_spec["spec"]["template"]["spec"]["containers"]
    assert "env" not in open_container and not any("restricted" in a for a in open_container["args"])
    with pytest.raises(ValueError, match="unknown restricted api"):
        DeploySpec(restricted_api=("repository",))


def test_a_link_looping_back_into_the_repository_is_not_copied(tmp_path: Path, repository: Path) -> None:
    """A symlink in the repository to the repository itself (``ln -s REPO REPO/repository``, as
    a repeated ``ln -s`` makes) is left out of ``models/``: the copy followed it until ELOOP,
    writing the repository again at every level (7 GB from the sample repository)."""
    (repository / "repository").symlink_to(repository)
    (repository / "add_sub" / "again").symlink_to(repository / "add_sub")
    out = tmp_path / "deploy"
    assert main(["deploy", f"--model-repository={repository}", f"--out={out}"]) == 0
    copied = {p.relative_to(out / "models").as_posix() for p in (out / "models").rglob("*")}
    assert copied == {"add_sub", "add_sub/config.pbtxt", "add_sub/1", "add_sub/1/model.onnx"}


def test_the_image_builds_on_the_named_base_with_local_wheels(tmp_path: Path, repository: Path) -> None:
    wheel = tmp_path / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
    wheel.write_bytes(b"not really a wheel")
    out = tmp_path / "deploy"
    assert main(["deploy", f"--model-repository={repository}", f"--out={out}", "--shm-size=512Mi",
                 "--base-image=localhost/debian-base:bookworm", f"--wheel={wheel}"]) == 0
    assert (out / "wheels" / wheel.name).read_bytes() == b"not really a wheel"
    text = (out / "Dockerfile").read_text()
    assert "RUN python3 -m venv /opt/workbench" in text and "PATH=/opt/workbench/bin:$PATH" in text
    assert "\nUSER workbench\n" in text and "useradd --uid 1000" in text
    assert "\nHEALTHCHECK " in text and "/v2/health/ready" in text
    # two stages: the wheels are COPYed (content-hashed: a new wheel rebuilds the layers; a
    # RUN --mount bind kept buildah's stale layer with the old wheel), the image takes only the venv
    build, image = text.split("\nFROM localhost/debian-base:bookworm\n")
    assert "FROM localhost/debian-base:bookworm AS build\n" in build and "COPY wheels/ /tmp/wheels/" in build
    assert "COPY --from=build /opt/workbench /opt/workbench" in image
    assert "wheels" not in image and "ARG " not in image and "PIP_" not in image
    assert "docker run --rm --shm-size=512m " in text
    assert "--shm-size=512m" in (out / "README.md").read_text()


def test_deploy_refuses_a_wheel_that_is_not_one(tmp_path: Path, repository: Path, capsys) -> None:
    for bad in (tmp_path / "missing.whl", tmp_path / "README.md"):
        with pytest.raises(SystemExit) as exit_info:
            main(["deploy", f"--model-repository={repository}", f"--out={tmp_path / 'deploy'}",
                  f"--wheel={bad}"])
        assert exit_info.value.code == 2
        assert str(bad) in capsys.readouterr().err


@pytest.mark.parametrize(("quantity", "docker"), [("1Gi", "1g"), ("512Mi", "512m"), ("2G", "2000000000"),
                                                  ("1048576", "1048576")])
def test_shm_size_for_docker_run(quantity: str, docker: str) -> None:
    assert docker_shm_size(quantity) == docker


def test_shm_size_docker_cannot_take_is_refused(repository: Path) -> None:
    with pytest.raises(ValueError, match="whole number of bytes"):
        render(DeploySpec(shm_size="1.5Gi"), repository)
