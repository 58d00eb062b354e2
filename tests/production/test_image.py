"""The image ``workbench deploy`` writes, built and run for real with podman.

A Debian bookworm base built from Debian's packages (``scripts/debian_base_image.sh``:
debootstrap, reused when podman has it), the product image built on it from the generated
Dockerfile (``podman build --format docker``: podman keeps HEALTHCHECK only in Docker's format),
a container of it serving the sample repository, driven with tritonclient over HTTP and gRPC
(outputs compared with the model files run here), SIGTERM with requests in flight (they all
finish; the container exits 0), the HEALTHCHECK and the non-root user.

torch: the image installs a CPU torch wheel from ``wheels/`` when ``workbench deploy --wheel``
put one there; pip finds it with ``pip download torch==X+cpu`` (this machine's pip config lists
a local CPU wheel). Without one (PyPI has only the multi-GB CUDA build, PyTorch's own index is
unreachable here) the image is built from the sample repository without its torch models.

Podman runs as root with runc, host networking, and ``scripts/podman.conf`` (no default ulimits,
cgroupfs). Ports 8300-8302. The timings are printed at the end of the module.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import importlib.metadata as metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from workbench.deploy import required_extras

ROOT = Path(__file__).resolve().parents[2]
BASE_IMAGE = "localhost/debian-base:bookworm"
IMAGE = "localhost/workbench-image-test:latest"
CONTAINER = f"workbench-image-test-{os.getpid()}"
HTTP_PORT, GRPC_PORT, METRICS_PORT = 8300, 8301, 8302
CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
#: the base image's Python (Debian bookworm): the tag of the torch wheel it can install
IMAGE_PYTHON = "3.11"
TIMINGS: dict[str, str] = {}


def _env() -> dict[str, str]:
    return {**os.environ, "CONTAINERS_CONF": str(ROOT / "scripts" / "podman.conf")}


def podman(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``podman ARGS`` (this project's containers.conf), output captured."""
    result = subprocess.run(["podman", *args], capture_output=True, text=True, env=_env(), timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)} exited {result.returncode}: {result.stderr[-3000:]}")
    return result


@pytest.fixture(scope="module")
def tools(request: pytest.FixtureRequest) -> None:
    """Skip without root or the Debian tools; print the timings when the module is done."""
    if os.geteuid() != 0:
        pytest.skip("podman runs as root here (rootless podman needs subuid maps)")
    for tool, package in (("podman", "podman"), ("runc", "runc"), ("debootstrap", "debootstrap")):
        if shutil.which(tool) is None and not Path(f"/usr/sbin/{tool}").exists():
            pytest.skip(f"{tool} not installed (apt-get install {package})")
    request.config.pluginmanager.register(_TimingsReport(), "workbench-image-timings")


class _TimingsReport:
    """Prints :data:`TIMINGS` in pytest's closing summary (after output capture ends)."""

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if TIMINGS:
            terminalreporter.write_line("image timings: " + ", ".join(f"{k} {v}" for k, v in TIMINGS.items()))


@pytest.fixture(scope="module")
def base_image(tools: None) -> str:
    """The debootstrap Debian base (built once, then reused: ``podman image exists``)."""
    present = podman("image", "exists", BASE_IMAGE, check=False).returncode == 0
    started = time.monotonic()
    subprocess.run(["bash", str(ROOT / "scripts" / "debian_base_image.sh"), BASE_IMAGE], check=True,
                   env=_env(), timeout=1200)
    TIMINGS["base image"] = "reused" if present else f"built in {time.monotonic() - started:.0f} s"
    return BASE_IMAGE


#: what the workbench wheel is built from (pyproject's packages, readme and data-files)
_WHEEL_SOURCES = ("pyproject.toml", "README.md", "workbench", "jupyter-config", "extensions/jupyterlab/labextension")


def _build_wheel(source: Path, wheels: Path) -> Path:
    """The workbench wheel, built from a copy of this checkout's sources (an in-place build
    leaves build/ and *.egg-info in the checkout: ruff then sorts ``import build`` as first-party,
    and a stale build/lib puts deleted modules into the wheel). SOURCE_DATE_EPOCH: the same code
    gives the same wheel bytes, so podman's cached layers hold."""
    for name in _WHEEL_SOURCES:
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        elif (ROOT / name).is_file():
            shutil.copy2(ROOT / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet",
                    "-w", str(wheels), str(source)], check=True, timeout=600,
                   env={**os.environ, "SOURCE_DATE_EPOCH": "315532800"})
    return next(wheels.glob("workbench-*.whl"))


def _cpu_torch_wheel(folder: Path) -> Path | None:
    """A CPU torch wheel for the image's Python where pip can find one (``+cpu``: never PyPI's
    CUDA build), else None."""
    from workbench.deploy.python_imports import torch_requirement

    pin = torch_requirement()
    if "==" not in pin:
        return None
    result = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet",
         f"--python-version={IMAGE_PYTHON}", "--platform=manylinux_2_28_x86_64", "-d", str(folder),
         f"{pin}+cpu"], capture_output=True, text=True, timeout=600)
    wheels = sorted(folder.glob("torch-*+cpu-*.whl"))
    return wheels[0] if result.returncode == 0 and wheels else None


@pytest.fixture(scope="module")
def context(tmp_path_factory: pytest.TempPathFactory, sample_repository: Path, base_image: str) -> Path:
    """The build context ``workbench deploy`` writes for the sample repository (the real CLI),
    with the workbench wheel and a CPU torch wheel; without a torch wheel, for the sample
    repository less its torch models."""
    work = tmp_path_factory.mktemp("image")
    wheels = work / "wheels"
    workbench_wheel = _build_wheel(work / "source", wheels)
    torch_wheel = _cpu_torch_wheel(wheels)
    repository = sample_repository
    if torch_wheel is None:
        repository = work / "models-without-torch"
        repository.mkdir()
        for folder in sorted(p for p in sample_repository.iterdir() if p.is_dir()):
            if not _needs_torch(folder):
                (repository / folder.name).symlink_to(folder.resolve())
        TIMINGS["torch"] = "no CPU torch wheel: the torch models are left out"
    out = work / "context"
    deploy = subprocess.run(
        [sys.executable, "-m", "workbench.hosts.cli", "deploy", f"--model-repository={repository}",
         f"--out={out}", f"--base-image={base_image}", f"--image={IMAGE}", f"--http-port={HTTP_PORT}",
         f"--grpc-port={GRPC_PORT}", f"--metrics-port={METRICS_PORT}", "--exit-timeout-secs=300",
         f"--wheel={workbench_wheel}", *([f"--wheel={torch_wheel}"] if torch_wheel else [])],
        capture_output=True, text=True, timeout=600)
    assert deploy.returncode == 0, deploy.stderr
    return out


def _needs_torch(folder: Path) -> bool:
    """Whether one model folder needs the ``pytorch`` extra (:func:`required_extras` scans a
    repository: here one holding only a link to ``folder``)."""
    with tempfile.TemporaryDirectory() as scratch:
        (Path(scratch) / folder.name).symlink_to(folder.resolve())
        return "pytorch" in required_extras(Path(scratch))


@pytest.fixture(scope="module")
def image(context: Path) -> Iterator[str]:
    """The product image, built from the generated Dockerfile (removed afterwards with the
    build's cached layers, unless WORKBENCH_KEEP_IMAGE is set: a rerun then builds in seconds)."""
    started = time.monotonic()
    podman("build", "--format", "docker", "--network", "host", "-v", "/etc/ssl/certs:/etc/ssl/certs:ro",
           "--build-arg", f"PIP_CERT={CA_BUNDLE}", "--build-arg", f"SSL_CERT_FILE={CA_BUNDLE}",
           "-t", IMAGE, str(context), timeout=1800)
    TIMINGS["image build"] = f"{time.monotonic() - started:.0f} s"
    size = int(podman("image", "inspect", "--format", "{{.Size}}", IMAGE).stdout.strip())
    TIMINGS["image size"] = f"{size / 1e6:.0f} MB"
    yield IMAGE
    if not os.environ.get("WORKBENCH_KEEP_IMAGE"):
        podman("rmi", "-f", IMAGE, check=False)
        # the build's layer cache (dangling intermediate images, GBs): a rerun then builds cold
        podman("image", "prune", "-f", check=False, timeout=600)


def _ready() -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{HTTP_PORT}/v2/health/ready", timeout=2) as answer:
            return answer.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _running() -> bool:
    state = podman("inspect", "--format", "{{.State.Running}}", CONTAINER, check=False)
    return state.stdout.strip() == "true"


@pytest.fixture(scope="module")
def container(image: str) -> Iterator[str]:
    """A container of the image serving its repository (host network, ``--shm-size`` as the
    generated README says); ready once ``/v2/health/ready`` answers 200."""
    podman("rm", "-f", CONTAINER, check=False)
    started = time.monotonic()
    podman("run", "-d", "--name", CONTAINER, "--network", "host", "--shm-size=1g", image)
    try:
        deadline = started + 300
        while not _ready():
            assert _running(), f"the container exited: {podman('logs', CONTAINER, check=False).stderr[-3000:]}"
            assert time.monotonic() < deadline, "not ready after 300 s"
            time.sleep(0.2)  # the readiness endpoint is all there is to wait on from outside
        TIMINGS["start to ready"] = f"{time.monotonic() - started:.1f} s"
        yield CONTAINER
    finally:
        podman("rm", "-f", CONTAINER, check=False)


def test_the_image_runs_as_a_non_root_user_with_its_healthcheck(container: str, image: str) -> None:
    assert podman("image", "inspect", "--format", "{{.Config.User}}", image).stdout.strip() == "workbench"
    version = podman("exec", container, "python3", "-c",
                     "import importlib.metadata as m; print(m.version('workbench'))").stdout.strip()
    assert version == metadata.version("workbench")  # this product's wheel, not PyPI's "workbench"
    # and this checkout's code: with the wheels bind-mounted (RUN --mount), buildah reused the
    # layer installed from an older wheel of the same name
    inside = podman("exec", container, "python3", "-c", _PACKAGE_DIGEST.format(
        package="__import__('workbench').__path__[0]")).stdout.strip()
    assert inside == _package_digest(ROOT / "workbench")
    status = podman("exec", container, "cat", "/proc/1/status").stdout
    assert re.search(r"^Uid:\s+1000\s", status, re.M), status  # the server process itself
    check = json.loads(podman("image", "inspect", "--format", "{{json .Config.Healthcheck}}", image).stdout)
    assert "/v2/health/ready" in " ".join(check["Test"])
    assert podman("healthcheck", "run", container, check=False).returncode == 0  # ready: healthy
    shm = podman("exec", container, "python3", "-c", "import os; s = os.statvfs('/dev/shm'); "
                 "print(s.f_blocks * s.f_frsize)").stdout
    assert int(shm) == 2**30  # --shm-size=1g


#: sha256 over the package's .py files (relative path and bytes, sorted), run in the container
_PACKAGE_DIGEST = ("import hashlib, pathlib; root = pathlib.Path({package}); h = hashlib.sha256(); "
                   "[h.update(p.relative_to(root).as_posix().encode() + p.read_bytes()) "
                   "for p in sorted(root.rglob('*.py'))]; print(h.hexdigest())")


def _package_digest(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode() + path.read_bytes())
    return digest.hexdigest()


def _http_infer(model: str, name: str, data: np.ndarray, output: str) -> np.ndarray:
    with httpclient.InferenceServerClient(f"127.0.0.1:{HTTP_PORT}") as client:
        tensor = httpclient.InferInput(name, list(data.shape), "FP32" if data.dtype == np.float32 else "BYTES")
        tensor.set_data_from_numpy(data, binary_data=True)
        return client.infer(model, [tensor]).as_numpy(output)


def _grpc_infer(model: str, name: str, data: np.ndarray, output: str) -> np.ndarray:
    with grpcclient.InferenceServerClient(f"127.0.0.1:{GRPC_PORT}") as client:
        tensor = grpcclient.InferInput(name, list(data.shape), "FP32" if data.dtype == np.float32 else "BYTES")
        tensor.set_data_from_numpy(data)
        return client.infer(model, [tensor], client_timeout=60).as_numpy(output)


def test_http_and_grpc_answers_match_the_model_files(container: str, context: Path) -> None:
    """digits_mlp (ONNX Runtime), digits_torchscript (torch, when in the image) and tokenizer
    (Python backend + tokenizers from requirements-models.txt), each compared with the same
    model file run here."""
    import onnxruntime

    pixels = np.random.default_rng(7).uniform(0, 16, (8, 64)).astype(np.float32)
    models = context / "models"
    latest = max((p for p in (models / "digits_mlp").iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    session = onnxruntime.InferenceSession(str(latest / "model.onnx"), providers=["CPUExecutionProvider"])
    expected = session.run(["logits"], {"pixels": pixels})[0]
    for infer in (_http_infer, _grpc_infer):
        np.testing.assert_allclose(infer("digits_mlp", "pixels", pixels, "logits"), expected, rtol=1e-5, atol=1e-5)
    if (models / "digits_torchscript").is_dir():
        import torch

        scripted = torch.jit.load(str(models / "digits_torchscript" / "1" / "model.pt"))
        with torch.no_grad():
            expected = scripted(torch.from_numpy(pixels)).numpy()
        for infer in (_http_infer, _grpc_infer):
            np.testing.assert_allclose(infer("digits_torchscript", "INPUT__0", pixels, "OUTPUT__0"), expected,
                                       rtol=1e-5, atol=1e-5)
    import tokenizers

    text = "Serving models in a container"
    encoding = tokenizers.Tokenizer.from_file(str(models / "tokenizer" / "1" / "tokenizer.json")).encode(text)
    ids = [token for token, mask in zip(encoding.ids, encoding.attention_mask, strict=True) if mask]  # unpadded
    texts = np.array([[text.encode()]], dtype=np.object_)
    for infer in (_http_infer, _grpc_infer):
        got = infer("tokenizer", "TEXT", texts, "input_ids")
        assert got[0].tolist() == ids


def test_a_small_dev_shm_is_warned_about_at_start(image: str, container: str) -> None:
    """``--shm-size=64m`` (the runtimes' default) for the sample repository's Python-backend
    instances: the server's start says so; the module's 1 GiB container does not."""
    small = f"{CONTAINER}-small-shm"
    podman("rm", "-f", small, check=False)
    # other ports (its own flags after the image): the module's container keeps 8300-8302
    podman("run", "-d", "--name", small, "--network", "host", "--shm-size=64m", image, "--model-repository=/models",
           "--http-port=8310", "--grpc-port=8311", "--metrics-port=8312")
    try:
        deadline = time.monotonic() + 300
        while "/dev/shm is 64 MiB, smaller than" not in (logs := _logs(small)):
            assert podman("inspect", "--format", "{{.State.Running}}", small).stdout.strip() == "true", logs[-3000:]
            assert time.monotonic() < deadline, logs[-3000:]
            time.sleep(0.2)  # the log is all there is to wait on from outside
        assert "--shm-size" in logs
    finally:
        podman("rm", "-f", small, check=False)
    assert "smaller than" not in _logs(container)


def _logs(name: str) -> str:
    result = podman("logs", name, check=False)
    return result.stdout + result.stderr


def _pending(model: str) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{METRICS_PORT}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    match = re.search(rf'^nv_inference_pending_request_count{{model="{model}",version="1"}} (\S+)$', text, re.M)
    return int(float(match.group(1))) if match else 0


def _encode(protocol: str) -> np.ndarray:
    """One long minilm_encoder request (40 x 128 tokens: no two fit one batch of 64)."""
    tokens = np.full((40, 128), 1000, np.int64)
    module = httpclient if protocol == "http" else grpcclient
    inputs = []
    for name in ("input_ids", "attention_mask", "token_type_ids"):
        tensor = module.InferInput(name, [40, 128], "INT64")
        tensor.set_data_from_numpy(tokens if name == "input_ids" else np.ones_like(tokens))
        inputs.append(tensor)
    if protocol == "http":
        with httpclient.InferenceServerClient(f"127.0.0.1:{HTTP_PORT}", network_timeout=600) as client:
            return client.infer("minilm_encoder", inputs).as_numpy("sentence_embedding")
    with grpcclient.InferenceServerClient(f"127.0.0.1:{GRPC_PORT}") as client:
        return client.infer("minilm_encoder", inputs, client_timeout=600).as_numpy("sentence_embedding")


def test_sigterm_lets_the_requests_in_flight_finish_and_the_container_exits_0(container: str) -> None:
    """Four requests (two HTTP, two gRPC) inside the server (one executing, three queued: the
    pending gauge says 3) when the container gets SIGTERM: all four answer, the container exits
    0. Runs last: it stops the module's container."""
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(_encode, protocol) for protocol in ("http", "grpc", "http", "grpc")]
        deadline = time.monotonic() + 120
        while _pending("minilm_encoder") < 3:
            assert not any(f.done() for f in futures), "a request finished before all four were in"
            assert time.monotonic() < deadline, "the four requests never reached the server"
            time.sleep(0.01)
        podman("kill", "--signal", "TERM", container)
        concurrent.futures.wait(futures, timeout=600)
    exit_code = podman("wait", container, timeout=600).stdout.strip()
    logs = _logs(container)
    failed = [f"{protocol}: {f.exception()!r}" for protocol, f in zip(("http", "grpc", "http", "grpc"), futures,
                                                                        strict=True) if f.exception()]
    assert not failed, "\n".join(failed) + "\n" + logs[-4000:]
    assert all(f.result().shape == (40, 384) and np.isfinite(f.result()).all() for f in futures)
    assert exit_code == "0", logs[-4000:]
    assert "stopping: waiting for in-flight requests" in logs
