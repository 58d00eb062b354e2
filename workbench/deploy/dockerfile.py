"""The Dockerfile of a model-repository image: ``workbench serve`` over ``/models``.

The image builds on any base with ``python3`` and its ``venv`` module (``python:3.12-slim``,
or Debian's own ``python3 python3-venv``, e.g. a debootstrap image), installs into a virtual
environment at ``/opt/workbench`` (Debian's Python refuses system-wide pip installs, PEP 668),
runs as the non-root user ``workbench`` (uid 1000), and has a HEALTHCHECK on
``/v2/health/ready``. Docker keeps HEALTHCHECK; podman/buildah only with ``--format docker``.
"""

from __future__ import annotations

import re

from workbench.deploy.spec import DeploySpec

#: PyTorch's CPU-only wheel index: torch from there has no CUDA libraries (PyPI's Linux torch
#: wheel bundles CUDA, GBs); the index also serves torch's own dependencies
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
#: the models' own packages (see :mod:`workbench.deploy.python_imports`), in the build context
REQUIREMENTS_FILE = "requirements-models.txt"
#: where the image's virtual environment lives
VENV = "/opt/workbench"
#: the image's user and its uid (not root)
USER, UID = "workbench", 1000
#: Debian packages an extra's libraries load that their wheels do not bundle: lightgbm (the
#: fil extra) needs the system's OpenMP runtime, libgomp.so.1 (xgboost's and treelite's wheels
#: bring their own); installed into the image with apt-get
SYSTEM_PACKAGES = {"fil": ("libgomp1",)}
_NO_WHEEL = "wheels/ has no workbench wheel: pip wheel --no-deps -w wheels <workbench source>"
_BINARY_UNITS = {"Ki": "k", "Mi": "m", "Gi": "g", "Ti": "t"}
_DECIMAL_UNITS = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}


def docker_shm_size(quantity: str) -> str:
    """A Kubernetes quantity (``1Gi``, ``512Mi``, ``2G``) as ``docker run --shm-size``'s value
    (``1g``, ``512m``; docker's units are binary, so decimal ones become bytes).

    Raises:
        ValueError: not a whole-number quantity in bytes (``500m`` millibytes, ``1.5Gi``).
    """
    match = re.fullmatch(r"([0-9]+)(Ki|Mi|Gi|Ti|k|M|G|T)?", quantity)
    if not match:
        raise ValueError(f"shm size '{quantity}' is not a whole number of bytes (e.g. 1Gi, 512Mi)")
    number, unit = match.groups()
    if unit in _BINARY_UNITS:
        return f"{number}{_BINARY_UNITS[unit]}"
    return str(int(number) * _DECIMAL_UNITS.get(unit or "", 1))


def run_command(spec: DeploySpec) -> str:
    """The ``docker run`` line for the image: its ports, and ``--shm-size`` from
    ``spec.shm_size`` (the container runtimes' default ``/dev/shm`` is 64 MiB; Python-backend
    stubs and shared-memory clients need more)."""
    ports = " ".join(f"-p {p}:{p}" for p in (spec.http_port, spec.grpc_port, spec.metrics_port))
    return f"docker run --rm --shm-size={docker_shm_size(spec.shm_size)} {ports} {spec.image}"


def _healthcheck(spec: DeploySpec) -> str:
    probe = (f"import urllib.request; urllib.request.urlopen("
             f"'http://127.0.0.1:{spec.http_port}/v2/health/ready', timeout=3)")
    return ("# ready = /v2/health/ready answers 200 (an error status or no answer exits 1); the start\n"
            "# period allows 5 minutes of model loading, as the Kubernetes startup probe does\n"
            "HEALTHCHECK --interval=15s --timeout=5s --start-period=300s --retries=3 \\\n"
            f'    CMD ["python3", "-c", "{probe}"]\n')


def _torch_step(torch_requirement: str | None) -> str:
    if torch_requirement is None:
        return ""
    return f"""\
# torch first, a CPU build: a torch wheel put into wheels/ (e.g. a local torch-*+cpu wheel) is
# taken from there (its dependencies from the package index), else torch comes from PyTorch's
# CPU wheel index. Not PyPI's: its Linux torch wheel bundles CUDA (GBs). Later installs find
# it satisfied (2.x.y+cpu is 2.x.y).
ARG TORCH_INDEX_URL={TORCH_CPU_INDEX}
RUN if ls /tmp/wheels/torch-*.whl >/dev/null 2>&1; \\
    then pip install --find-links /tmp/wheels "{torch_requirement}"; \\
    else pip install --index-url "$TORCH_INDEX_URL" "{torch_requirement}"; fi

"""


def _system_step(extras: list[str]) -> str:
    packages = sorted({p for extra in extras for p in SYSTEM_PACKAGES.get(extra, ())})
    if not packages:
        return ""
    return ("# libraries the models' packages load from the system (a Debian-based base image):\n"
            f"# {', '.join(packages)} ({', '.join(e for e in sorted(extras) if e in SYSTEM_PACKAGES)})\n"
            "RUN apt-get update && apt-get install -y --no-install-recommends "
            f"{' '.join(packages)} \\\n    && rm -rf /var/lib/apt/lists/*\n")


def dockerfile(spec: DeploySpec, extras: list[str], torch_requirement: str | None = None) -> str:
    """Dockerfile text for the build context ``workbench deploy`` writes (``models/``,
    ``wheels/``, ``requirements-models.txt``).

    Args:
        spec: ports, base image (``spec.python_image``), serve flags, ``/dev/shm`` size.
        extras: workbench extras the repository's models need (``pytorch``, ``openvino``);
            those in :data:`SYSTEM_PACKAGES` add an ``apt-get install`` of their Debian
            packages to the image (a Debian-based ``spec.python_image``).
        torch_requirement: e.g. ``torch==2.13.0`` when a model needs torch: installed first,
            a CPU build (from ``wheels/`` when a torch wheel is there, else PyTorch's CPU wheel
            index), so that nothing after it pulls PyPI's CUDA build; None when no model
            needs torch.
    """
    package = f"$wheel[{','.join(sorted(extras))}]" if extras else "$wheel"
    ports = f"{spec.http_port} {spec.grpc_port} {spec.metrics_port}"
    flags = ", ".join(f'"{arg}"' for arg in spec.serve_args())
    return f"""\
# Generated by `workbench deploy`: serves ./models with `workbench serve`.
# Build: put the workbench wheel into ./wheels (`pip wheel --no-deps -w wheels <workbench
# source>`, or `workbench deploy --wheel`), then `docker build -t {spec.image} .`
# (podman: `podman build --format docker ...`, else the HEALTHCHECK is dropped).
# Run: {run_command(spec)}
# (/dev/shm: the runtimes' default is 64 MiB; Python-backend models and shared-memory
# clients need more, hence --shm-size; Kubernetes: the memory emptyDir of k8s/deployment.yaml)
# Two stages: "build" installs into the virtual environment {VENV} from wheels/ (COPY:
# a new wheel invalidates the cached layers, where a RUN --mount bind does not with buildah);
# the image copies only that environment, not the wheels, pip's settings or the build ARGs.
FROM {spec.python_image} AS build
# pip's certificate bundle and index (e.g. PIP_CERT, PIP_INDEX_URL) for the build only:
# `--build-arg PIP_CERT=...`
ARG PIP_CERT
ARG SSL_CERT_FILE
ARG PIP_INDEX_URL
ENV PYTHONDONTWRITEBYTECODE=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \\
    VIRTUAL_ENV={VENV} PATH={VENV}/bin:$PATH
RUN python3 -m venv {VENV}
COPY wheels/ /tmp/wheels/
COPY {REQUIREMENTS_FILE} /tmp/{REQUIREMENTS_FILE}
{_torch_step(torch_requirement)}# workbench from its wheel file in wheels/ (the newest there), never by name from an
# index: PyPI's workbench is another project. Then the packages the Python-backend models
# import ({REQUIREMENTS_FILE}).
RUN wheel=$(ls -v /tmp/wheels/workbench-*.whl | tail -n 1) \\
    && {{ [ -n "$wheel" ] || {{ echo "{_NO_WHEEL}" >&2; exit 1; }}; }} \\
    && pip install --find-links /tmp/wheels "{package}" -r /tmp/{REQUIREMENTS_FILE}

FROM {spec.python_image}
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 VIRTUAL_ENV={VENV} PATH={VENV}/bin:$PATH
COPY --from=build {VENV} {VENV}
{_system_step(extras)}RUN useradd --uid {UID} --user-group --create-home {USER}
COPY --chown={USER}:{USER} models/ /models/
USER {USER}
WORKDIR /home/{USER}

# HTTP/REST, gRPC, Prometheus metrics
EXPOSE {ports}
{_healthcheck(spec)}# SIGTERM (docker stop, Kubernetes) drains in-flight requests, then exits 0
STOPSIGNAL SIGTERM
ENTRYPOINT ["workbench", "serve"]
CMD [{flags}]
"""


__all__ = ["REQUIREMENTS_FILE", "SYSTEM_PACKAGES", "TORCH_CPU_INDEX", "UID", "USER", "VENV",
           "docker_shm_size", "dockerfile", "run_command"]
