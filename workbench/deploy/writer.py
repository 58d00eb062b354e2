"""Write a deployable build context for a model repository: ``Dockerfile``,
``requirements-models.txt`` (the Python-backend models' packages), ``models/`` (a copy of the
repository), ``wheels/``, ``k8s/*.yaml`` and a README.

This is ``workbench deploy --out DIR`` and the Headless tab's "Write deployment" button.
"""

from __future__ import annotations

import contextlib
import re
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.deploy import kserve, kubernetes, kustomize, yaml_text
from workbench.deploy.dockerfile import REQUIREMENTS_FILE, dockerfile, run_command
from workbench.deploy.monitoring import monitoring_files
from workbench.deploy.nginx import NginxSpec, nginx_config
from workbench.deploy.python_imports import PythonRequirements, python_requirements, torch_requirement
from workbench.deploy.spec import DeploySpec

#: files of a model repository that do not go into the image
_IGNORED = ("*.bak", ".*", "__pycache__", "*.tmp")


def required_extras(repository: Path) -> list[str]:
    """The workbench extras the models of ``repository`` need: ``pytorch`` for TorchScript
    models (``platform: "pytorch_libtorch"``, ``backend: "pytorch"`` or a ``model.pt``),
    ``openvino`` for OpenVINO ones (``backend: "openvino"`` or a ``model.xml``), ``fil`` for
    tree models (``backend: "fil"``; no file name is FIL's alone, the config says), ``tensorflow``
    for SavedModels (``platform: "tensorflow_savedmodel"``, ``backend: "tensorflow"`` or a
    ``model.savedmodel`` folder), ``dali`` for DALI pipelines (``backend: "dali"`` or a
    ``model.dali``). The packages
    Python-backend models import are :func:`python_requirements`'s."""
    extras = set()
    for folder in sorted(p for p in repository.iterdir() if p.is_dir()):
        config = ModelConfig()
        # no or broken config (unreadable, not UTF-8, not text format): the files tell
        with contextlib.suppress(OSError, UnicodeDecodeError, text_format.ParseError):
            text_format.Parse((folder / "config.pbtxt").read_text(encoding="utf-8"), config)
        files = {p.name for p in folder.glob("*/*")}
        if config.platform == "pytorch_libtorch" or config.backend == "pytorch" or "model.pt" in files:
            extras.add("pytorch")
        if config.backend == "openvino" or "model.xml" in files:
            extras.add("openvino")
        if config.backend == "fil":
            extras.add("fil")
        if config.platform == "tensorflow_savedmodel" or config.backend == "tensorflow" \
                or "model.savedmodel" in files:
            extras.add("tensorflow")
        if config.backend == "dali" or "model.dali" in files:
            extras.add("dali")
    return sorted(extras)


def render(spec: DeploySpec, repository: Path,
           requirements: PythonRequirements | None = None,
           nginx: NginxSpec | None = None) -> dict[str, str]:
    """Every generated text file, by path relative to the output folder (the models are
    copied, not rendered). ``requirements``: :func:`python_requirements` of ``repository``
    (scanned here when None); ``nginx``: the load balancer of ``nginx/nginx.conf``
    (default :class:`NginxSpec`: three replicas on this host)."""
    if requirements is None:
        requirements = python_requirements(repository)
    extras = required_extras(repository)
    needs_torch = "pytorch" in extras or requirements.needs_torch
    return _with_kustomize_base({
        "Dockerfile": dockerfile(spec, extras, torch_requirement() if needs_torch else None),
        REQUIREMENTS_FILE: _requirements_text(requirements),
        ".dockerignore": "**/*.bak\n**/__pycache__\n**/.*.tmp\n",
        "k8s/deployment.yaml": yaml_text.dump(kubernetes.deployment(spec)),
        "k8s/service.yaml": yaml_text.dump(kubernetes.service(spec)),
        "k8s/hpa.yaml": yaml_text.dump(kubernetes.autoscaler(spec)),
        "k8s/prometheus-adapter-rules.yaml": yaml_text.dump(kubernetes.adapter_rules()),
        # Prometheus alert rules, their promtool unit tests, the Grafana dashboard
        **monitoring_files(spec),
        # Kubernetes part (issue 21): PDB, ServiceMonitor, the kustomize base + example overlay,
        # KServe runtime + InferenceService (k8s/kserve/, not in the base)
        **_kubernetes_extras(spec, repository),
        "wheels/README.md": "Put the workbench wheel here: "
                            "`pip wheel --no-deps -w wheels <workbench source>`.\n",
        "README.md": _readme(spec, requirements),
        # replicas behind nginx, for users without Kubernetes (workbench.deploy.nginx)
        "nginx/nginx.conf": nginx_config(nginx or NginxSpec()),
        "nginx/tmp/README.md": "nginx's temporary files (request bodies it buffers).\n",
    })


def _kubernetes_extras(spec: DeploySpec, repository: Path) -> dict[str, str]:
    files = {
        "k8s/pdb.yaml": yaml_text.dump(kubernetes.disruption_budget(spec)),
        "k8s/servicemonitor.yaml": yaml_text.dump(kubernetes.service_monitor(spec)),
        "k8s/kserve/servingruntime.yaml": yaml_text.dump(kserve.serving_runtime(spec, repository)),
        "k8s/kserve/inferenceservice.yaml": yaml_text.dump(kserve.inference_service(spec)),
        "overlays/example/kustomization.yaml": yaml_text.dump(kustomize.example_overlay(spec)),
    }
    return files


def _is_object(text: str) -> bool:
    """A YAML text of :mod:`yaml_text` holding a Kubernetes object (top-level ``apiVersion``
    and ``kind``), not a config fragment such as prometheus-adapter's rules."""
    return bool(re.search(r"^apiVersion: ", text, re.M) and re.search(r"^kind: ", text, re.M))


def _with_kustomize_base(files: dict[str, str]) -> dict[str, str]:
    """``files`` plus ``k8s/kustomization.yaml`` listing every Kubernetes object written
    directly in ``k8s/`` (whichever module renders it) but the Prometheus operator's
    (ServiceMonitor, PrometheusRule): ``kubectl apply -k`` fails on a cluster without the
    operator's CRDs, so those are applied on their own where the operator runs."""
    resources = sorted(path.removeprefix("k8s/") for path, text in files.items()
                       if path.startswith("k8s/") and path.count("/") == 1
                       and path.endswith(".yaml") and _is_object(text)
                       and not re.search(r"^apiVersion: \"?monitoring\.coreos\.com/", text, re.M))
    return {**files, "k8s/kustomization.yaml": yaml_text.dump(kustomize.base(resources))}


def _requirements_text(requirements: PythonRequirements) -> str:
    lines = ["# Generated by `workbench deploy`: the third-party packages the Python-backend models",
             "# import (their model.py and the helper modules beside it), pinned to the versions",
             "# installed where the deployment was written; workbench's own dependencies and torch",
             "# (installed from the CPU wheel index, see the Dockerfile) are not repeated here."]
    lines += [f"# WARNING: {warning}" for warning in requirements.warnings]
    lines += requirements.requirement_lines()
    return "\n".join(lines) + "\n"


def _ignored() -> Callable[[str, list[str]], set[str]]:
    """copytree's ``ignore``: :data:`_IGNORED`, and links to the repository or a folder above a
    copied one (``ln -s REPO REPO/repository``): followed, they copy the tree again at every
    level until the path is too long (ELOOP)."""
    patterns = shutil.ignore_patterns(*_IGNORED)

    def ignore(folder: str, names: list[str]) -> set[str]:
        skipped = set(patterns(folder, names))
        here = Path(folder).resolve()
        for name in names:
            path = Path(folder) / name
            if path.is_symlink() and path.is_dir() and here.is_relative_to(path.resolve()):
                skipped.add(name)
        return skipped

    return ignore


def check_folders(repository: Path, out: Path) -> tuple[Path, Path]:
    """``repository`` and ``out``, resolved, once they are usable for :func:`write_deployment`.

    Raises:
        FileNotFoundError: ``repository`` is not a folder.
        ValueError: ``out`` is ``repository`` or inside it (the copy would copy itself).
    """
    repository, out = Path(repository).resolve(), Path(out).resolve()
    if not repository.is_dir():
        raise FileNotFoundError(f"model repository '{repository}' is not a folder")
    if out == repository or out.is_relative_to(repository):
        raise ValueError(f"the output folder '{out}' must not be inside the model repository")
    return repository, out


def write_deployment(spec: DeploySpec, repository: Path, out: Path, copy_models: bool = True,
                     requirements: PythonRequirements | None = None,
                     nginx: NginxSpec | None = None,
                     wheels: Sequence[Path] = ()) -> list[Path]:
    """Write :func:`render`'s files under ``out`` and copy ``repository`` into ``out/models``
    (config backups, hidden and temporary files left out; linked model folders copied as
    files). Existing generated files are overwritten; an existing ``out/models`` is replaced.
    ``requirements``: as :func:`render`'s (its ``warnings`` are what a caller shows);
    ``nginx``: as :func:`render`'s. ``wheels``: wheel files copied into ``out/wheels`` (the
    workbench wheel, a local CPU torch wheel: the image installs from there first).

    Returns:
        The paths written (files only; ``out/models`` once, as a folder).

    Raises:
        FileNotFoundError: ``repository`` is not a folder, or a wheel is not a file.
        ValueError: ``out`` is ``repository`` or inside it (the copy would copy itself), or a
            wheel's name does not end in ``.whl``.
    """
    repository, out = check_folders(repository, out)
    _check_wheels(wheels)
    written = []
    for relative, text in render(spec, repository, requirements, nginx).items():
        path = out / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    if copy_models:
        models = out / "models"
        if models.exists():
            shutil.rmtree(models)
        shutil.copytree(repository, models, ignore=_ignored())
        written.append(models)
    # local wheels for the image (`workbench deploy --wheel`)
    for wheel in wheels:
        target = out / "wheels" / Path(wheel).name
        shutil.copyfile(wheel, target)
        written.append(target)
    return written


def _check_wheels(wheels: Sequence[Path]) -> None:
    for wheel in wheels:
        if not Path(wheel).name.endswith(".whl"):
            raise ValueError(f"'{wheel}' is not a wheel (a .whl file)")
        if not Path(wheel).is_file():
            raise FileNotFoundError(f"wheel '{wheel}' is not a file")


def _readme(spec: DeploySpec, requirements: PythonRequirements) -> str:
    return f"""\
# {spec.name}: a workbench model repository, deployable

Generated by `workbench deploy`.

1. `pip wheel --no-deps -w wheels <workbench source>` (the image installs workbench from it;
   `workbench deploy --wheel FILE` copies wheels here, e.g. a local CPU torch wheel)
2. `docker build -t {spec.image} .` (podman: `podman build --format docker`, which keeps the
   HEALTHCHECK) and push the image where the cluster pulls from. Base image: `{spec.python_image}`
   (`workbench deploy --base-image`: any image with `python3` and its `venv` module).
   Try it: `{run_command(spec)}`
3. {_secret_step(spec)}`kubectl apply -f k8s/deployment.yaml -f k8s/service.yaml -f k8s/pdb.yaml`
4. For autoscaling on queue time: add the rule of `k8s/prometheus-adapter-rules.yaml` to
   prometheus-adapter's `rules:`, then `kubectl apply -f k8s/hpa.yaml`.
5. With the Prometheus operator: `kubectl apply -f k8s/servicemonitor.yaml -f
   k8s/prometheus-rule.yaml` (the Prometheus's `serviceMonitorSelector` / `ruleSelector` must
   match their labels; without the operator the pods' `prometheus.io/*` annotations do the
   scraping and `prometheus/alerts.rules.yml` goes into `rule_files:`).

Or all of `k8s/` at once with kustomize: `k8s/kustomization.yaml` is the base (Deployment,
Service, HPA, PodDisruptionBudget; not the operator's ServiceMonitor and PrometheusRule, which
a cluster without the operator refuses: step 5), `overlays/example/` an overlay to copy
(namespace `models`, the image from your registry): `kubectl kustomize overlays/example` shows
what `kubectl apply -k overlays/example` applies.

With KServe instead: `kubectl apply -f k8s/kserve/servingruntime.yaml` then
`-f k8s/kserve/inferenceservice.yaml` (a ServingRuntime running this image with
`protocolVersions: [v2, grpc-v2]`, HTTP on 8080 and gRPC on 9000 as KServe expects, and an
InferenceService on it, Open Inference protocol v2; the repository is in the image, so no
`storageUri`).

## What the manifests assume
- Probes: readiness on `/v2/health/ready` (false while a replica drains or when a model failed
  to load), liveness on `/v2/health/live`, a startup probe allowing 5 minutes of model loading.
- `/dev/shm` is a memory-backed emptyDir of {spec.shm_size} (Python-backend stubs and
  shared-memory clients); outside Kubernetes, `--shm-size` as above (the runtimes' default is
  64 MiB).
- The image runs as the non-root user `workbench` (uid 1000) and has a HEALTHCHECK on
  `/v2/health/ready`.
- The PodDisruptionBudget lets drains and upgrades evict one replica at a time
  (`maxUnavailable: 1`).
- Prometheus scrapes the pods through the `prometheus.io/scrape|port|path` annotations (port
  {spec.metrics_port}, `/metrics`) and keeps the `namespace` and `pod` labels.
- The HPA scales between {spec.min_replicas} and {spec.max_replicas} replicas on the custom metric
  `{kubernetes.QUEUE_METRIC}`: mean queue time per request over the last minute,
  **microseconds**, target {spec.queue_time_target_us} µs. prometheus-adapter computes it from
  Triton's counters: `rate(nv_inference_queue_duration_us) / rate(nv_inference_request_success)`.
  It also scales on CPU ({kubernetes.CPU_TARGET_PERCENT} % of the request), and takes the
  larger of the two counts.
- {_restriction_note(spec)}
- Model control mode `{spec.model_control_mode}`; the repository is baked into the image at
  `/models`.
- Monitoring: alert rules in `prometheus/alerts.rules.yml` (and as a `PrometheusRule` in
  `k8s/prometheus-rule.yaml`; `cd prometheus && promtool test rules alerts.test.yml` runs
  their unit tests) and a Grafana dashboard in `grafana/dashboard.json`, both selecting the
  series with `{spec.alert_selector}`.
- {_packages_note(requirements)}
"""


def _packages_note(requirements: PythonRequirements) -> str:
    if not requirements.models:
        return "No Python-backend model: the image needs no package beyond workbench's."
    found = ", ".join(f"`{line.split('  #')[0]}`" for line in requirements.requirement_lines()) or "none"
    note = (f"The Python-backend models ({', '.join(requirements.models)}) were read for their "
            f"imports (model.py and the helper modules beside it, not run): `{REQUIREMENTS_FILE}` "
            f"installs their third-party packages ({found}), pinned to the versions installed "
            "where this was written.")
    if requirements.needs_torch:
        note += " They need torch: the image installs a CPU torch first."
    if requirements.warnings:
        note += "\n  **Check before building**:\n" + "\n".join(
            f"  - {warning}" for warning in requirements.warnings)
    return note


def _secret_step(spec: DeploySpec) -> str:
    if not spec.restricted_api:
        return ""
    return (f"`kubectl create secret generic {spec.secret_name} --from-literal=api-key=$(head -c 32 "
            "/dev/urandom | base64 | tr -d '=+/')` (the API key; pods do not start without it), then ")


def _restriction_note(spec: DeploySpec) -> str:
    if not spec.restricted_api:
        return "No API group is restricted: anyone reaching the Service may use every API."
    groups = ", ".join(spec.restricted_api)
    return (f"Restricted API groups ({groups}) need the key of the Secret `{spec.secret_name}`: "
            f"header `{spec.api_key_header}: <key>` over HTTP, metadata "
            f"`triton-grpc-protocol-{spec.api_key_header}: <key>` over gRPC (tritonserver's "
            "`--http-restricted-api` / `--grpc-restricted-protocol`). The image's own default "
            "command restricts nothing: `docker run` it with those flags.")


__all__ = ["check_folders", "python_requirements", "render", "required_extras", "write_deployment"]
