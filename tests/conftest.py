"""Shared fixtures: real model repositories, a real Server, in-process HTTP and gRPC clients."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
import pytest_asyncio
from tritonclient.grpc import service_pb2_grpc

from workbench import Server, ServerOptions
from workbench.backends.registry import register_backend
from workbench.frontends.grpc import create_grpc_server
from workbench.frontends.http import create_app
from workbench.testing.fake_backend import BEHAVIOUR, FakeBackend
from workbench.testing.models import add_broken_models, build_test_repository

ROOT = Path(__file__).resolve().parents[1]
SAMPLE_REPOSITORY = ROOT / "sample_models" / "repository"
TESTS = ROOT / "tests"

#: the tiers (markers registered in pyproject.toml), given by folder; `make test-fast` runs
#: the tests with none of them, `make test` runs them all but `production` (`make test-production`)
TIER_BY_FOLDER = {"e2e": "e2e", "browser": "browser", "gpu": "gpu", "production": "production"}
#: in-process modules that take tens of seconds or more each (notebooks in kernels, real
#: server processes, subprocess scripts, hypothesis runs): the `slow` tier
SLOW_MODULES = {
    "test_notebooks.py",
    "test_examples.py",
    "test_gpu_check_script.py",
    "test_fuzz.py",
    "test_grpc_native.py",
}
#: the gRPC fixtures serve with the native front end (ServerOptions reads WORKBENCH_GRPC_FRONTEND):
#: tests marked ``python_grpc`` skip (docs/grpc-native.md says what it does not serve)
NATIVE_GRPC = os.environ.get("WORKBENCH_GRPC_FRONTEND") == "native"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test with its tier (``e2e``, ``browser``, ``gpu`` by folder, ``slow`` by
    module), so ``-m "not (e2e or browser or gpu or slow)"`` is the fast tier."""
    for item in items:
        try:
            parts = item.path.relative_to(TESTS).parts
        except ValueError:
            continue
        tier = TIER_BY_FOLDER.get(parts[0]) if len(parts) > 1 else None
        if tier is not None:
            item.add_marker(tier)
        elif parts[-1] in SLOW_MODULES:
            item.add_marker("slow")
        if NATIVE_GRPC and item.get_closest_marker("python_grpc") is not None:
            item.add_marker(pytest.mark.skip(reason="not served by the native gRPC front end"))


@pytest.fixture(scope="session")
def sample_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real sample models (digits_mlp, minilm_encoder, ...); built here if `make` did not, or
    if a build script changed since (as the Makefile decides: `.built` older than a build*.py).

    When ``sample_models/repository`` is a symlink (a repository shared between worktrees) it
    is never written to: a temporary repository links the shared models that are current for
    this checkout's recipes and builds the others (e.g. a sample this branch adds) beside them.
    """
    if SAMPLE_REPOSITORY.is_symlink():
        return _overlay_repository(tmp_path_factory.mktemp("samples"))
    stamp = SAMPLE_REPOSITORY / ".built"
    scripts = (ROOT / "sample_models").glob("build*.py")
    if not stamp.exists() or stamp.stat().st_mtime < max(p.stat().st_mtime for p in scripts):
        subprocess.run(
            [sys.executable, str(ROOT / "sample_models" / "build.py"), "--out", str(SAMPLE_REPOSITORY)],
            check=True,
        )
        stamp.touch()
    return SAMPLE_REPOSITORY


def _overlay_repository(out: Path) -> Path:
    sys.path.insert(0, str(ROOT / "sample_models"))
    try:
        import build  # sample_models/ (on sys.path here)
    finally:
        sys.path.pop(0)
    shared = SAMPLE_REPOSITORY.resolve()
    missing = []
    for name, builder in build.BUILDERS.items():
        if build.stale_reason(shared / name, build.recipe_digest(builder)) is None:
            (out / name).symlink_to(shared / name, target_is_directory=True)
        else:
            missing.append(name)
    if missing:
        command = [sys.executable, str(ROOT / "sample_models" / "build.py"), "--out", str(out)]
        subprocess.run(command + [a for n in missing for a in ("--model", n)], check=True)
    return out


@pytest.fixture(scope="session")
def test_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Small real ONNX models covering datatypes, shapes, versions and instance groups."""
    return build_test_repository(tmp_path_factory.mktemp("repo"))


@pytest.fixture(scope="session")
def mixed_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The test models plus models that must fail to load (broken config/file/dtype)."""
    repo = build_test_repository(tmp_path_factory.mktemp("mixed"))
    return add_broken_models(repo)


@pytest_asyncio.fixture
async def server(test_repository: Path):
    """A started engine on the test repository (model control mode none)."""
    async with Server(ServerOptions(model_repository=[str(test_repository)])) as engine:
        yield engine


@contextlib.asynccontextmanager
async def _asgi_client(server: Server) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=create_app(server))
    async with httpx.AsyncClient(transport=transport, base_url="http://workbench") as http:
        yield http


@pytest.fixture
def fake_backend():
    """The fake backend registered as ``fake``, its shared :data:`BEHAVIOUR` reset before and
    after the test (every gate opened: nothing stays blocked after a failure). Modules that
    serve fake models use it with ``pytestmark = pytest.mark.usefixtures("fake_backend")``."""
    register_backend("fake", FakeBackend)
    BEHAVIOUR.reset()
    yield BEHAVIOUR
    BEHAVIOUR.reset()


@pytest_asyncio.fixture
async def stopper():
    """``stopper(server)`` stops that started server after the test, with the fake backend's
    gates opened first (a test that failed mid-wait leaves no execution blocked)."""
    servers: list[Server] = []
    yield servers.append
    BEHAVIOUR.gate.set()
    BEHAVIOUR.release.set()
    for server in servers:
        await server.stop()


@pytest.fixture
def shm_segments():
    """``create(byte_size) -> (key, handle)``: a POSIX shm segment with a unique key, made by
    tritonclient's own helper (``tritonclient.utils.shared_memory``), unlinked after the test."""
    import uuid

    import tritonclient.utils.shared_memory as shm

    handles = []

    def create(byte_size: int):
        key = f"/wb_test_{uuid.uuid4().hex[:12]}"
        handle = shm.create_shared_memory_region(key[1:], key, byte_size, create_only=True)
        handles.append(handle)
        return key, handle

    yield create
    for handle in handles:
        shm.destroy_shared_memory_region(handle)


@pytest.fixture
def asgi_client():
    """``async with asgi_client(server) as http``: an httpx client on the real app in-process."""
    return _asgi_client


@pytest_asyncio.fixture
async def client(server: Server):
    """httpx client talking to the real FastAPI app in-process (ASGI transport)."""
    async with _asgi_client(server) as http:
        yield http


@contextlib.asynccontextmanager
async def _grpc_serving(server: Server, **options: Any) -> AsyncIterator[int]:
    grpc_server, port = create_grpc_server(server, ServerOptions(grpc_address="127.0.0.1", grpc_port=0, **options))
    await grpc_server.start()
    try:
        yield port
    finally:
        await grpc_server.stop(None)


@pytest.fixture
def grpc_serving():
    """``async with grpc_serving(server, **options) as port``: a grpc.aio server for ``server``
    with those ``ServerOptions`` fields (gRPC flags), on a free port of 127.0.0.1."""
    return _grpc_serving


@contextlib.asynccontextmanager
async def _grpc_stub(server: Server) -> AsyncIterator[service_pb2_grpc.GRPCInferenceServiceStub]:
    async with _grpc_serving(server) as port, grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        yield service_pb2_grpc.GRPCInferenceServiceStub(channel)


@pytest.fixture
def grpc_stub():
    """``async with grpc_stub(server) as stub``: a stub on a grpc.aio server serving ``server``
    on port 0, for tests on any event loop (module-scoped servers included)."""
    return _grpc_stub


@pytest_asyncio.fixture
async def stub_for():
    """``await stub_for(server)``: a stub on a grpc.aio server serving ``server`` on port 0."""
    started = []

    async def make(server: Server) -> service_pb2_grpc.GRPCInferenceServiceStub:
        grpc_server, port = create_grpc_server(server, ServerOptions(grpc_address="127.0.0.1", grpc_port=0))
        await grpc_server.start()
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
        started.append((grpc_server, channel))
        return service_pb2_grpc.GRPCInferenceServiceStub(channel)

    yield make
    for grpc_server, channel in started:
        await channel.close()
        await grpc_server.stop(None)


@pytest.fixture(params=["process_vm", "descriptor"])
def copy_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each system shared-memory test once per copy path of :mod:`workbench.engine.shm.shm_copy`:
    ``process_vm`` (skipped where the kernel has no process_vm_readv) and ``descriptor``
    (pread / pwrite forced)."""
    from workbench.engine.shm import shm_copy

    if request.param == "descriptor":
        monkeypatch.setattr(shm_copy, "USE_PROCESS_VM", False)
    elif not shm_copy.process_vm_in_use():
        pytest.skip("no process_vm_readv here")
    return str(request.param)
