"""Memory footprint per model version: host RSS growth while each instance loads, in
statistics' ``memory_usage`` (Triton's ``MemoryUsage``: type, id, byte_size)."""

from __future__ import annotations

import ctypes
import importlib
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from workbench import Server, ServerOptions
from workbench.backends.registry import register_backend
from workbench.engine.models.load_memory import GrowthLedger
from workbench.gpu.memory import GpuMemoryReading
from workbench.stats.statistics import MemoryUsage, host_rss_bytes, sum_memory
from workbench.testing.fake_backend import FAKE_CONFIG, FakeBackend, write_backend_model
from workbench.testing.models import write_model
from workbench.testing.python_backend import copy_python_model

BIG = 48 * 2**20  # bytes of float32 initializer in the big model


def _const_add_graph(n: int) -> helper.GraphProto:
    """X [n] FP32 -> Y = X + W, W an initializer of n float32 (random: not compressible)."""
    weights = np.random.default_rng(0).random(n, dtype=np.float32)
    return helper.make_graph(
        [helper.make_node("Add", ["X", "W"], ["Y"])], "const_add",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [n])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [n])],
        [numpy_helper.from_array(weights, "W")],
    )


def _config(name: str, n: int) -> str:
    return (f'name: "{name}"\nbackend: "onnxruntime"\nmax_batch_size: 0\n'
            f'input [ {{ name: "X" data_type: TYPE_FP32 dims: [ {n} ] }} ]\n'
            f'output [ {{ name: "Y" data_type: TYPE_FP32 dims: [ {n} ] }} ]\n'
            "instance_group [ { count: 1 kind: KIND_CPU } ]\n")


def test_sum_memory_and_rss() -> None:
    assert sum_memory([MemoryUsage("CPU", 0, 5), MemoryUsage("GPU", 1, 7),
                       MemoryUsage("CPU", 0, 6)]) == [MemoryUsage("CPU", 0, 11),
                                                      MemoryUsage("GPU", 1, 7)]
    assert MemoryUsage("GPU", 1, 7).as_dict() == {"type": "GPU", "id": 1, "byte_size": 7}
    rss = host_rss_bytes()
    assert rss is None or rss > 10 * 2**20


@pytest.mark.skipif(host_rss_bytes() is None, reason="no /proc/self/statm here")
async def test_big_initializer_reports_more_than_tiny(tmp_path: Path) -> None:
    write_model(tmp_path, "tiny", _config("tiny", 4), _const_add_graph(4))
    write_model(tmp_path, "big", _config("big", BIG // 4), _const_add_graph(BIG // 4))
    options = ServerOptions(model_repository=[str(tmp_path)], model_control_mode="explicit",
                            load_model=["tiny", "big"], model_load_thread_count=1)
    async with Server(options) as server:
        stats = {s["name"]: s for s in (await server.statistics())["model_stats"]}
    memory = {name: s["memory_usage"] for name, s in stats.items()}
    for name in ("tiny", "big"):
        (entry,) = memory[name]
        assert entry["type"] == "CPU" and entry["id"] == 0
    big, tiny = memory["big"][0]["byte_size"], memory["tiny"][0]["byte_size"]
    assert big >= BIG // 2, memory  # the weights are resident (ORT may share the file's pages)
    assert big > tiny + BIG // 2, memory


# ----------------------------------------------------------------- honest figures (issue 16)
async def test_measured_memory_is_marked_an_estimate_outside_tritons_json(tmp_path: Path) -> None:
    write_model(tmp_path, "tiny", _config("tiny", 4), _const_add_graph(4))
    async with Server(ServerOptions(model_repository=[str(tmp_path)])) as server:
        (stats,) = server.model_statistics()
        (usage,) = stats.memory_usage
        assert (usage.kind, usage.estimate) == ("CPU", True)  # the loader's RSS growth
        (entry,) = (await server.statistics())["model_stats"][0]["memory_usage"]
        assert set(entry) == {"type", "id", "byte_size"}  # Triton's message, nothing added


def test_loads_measured_at_once_share_what_grew_while_both_ran() -> None:
    """Loads of different models run at once (Triton's parallel loads, issue 33 L6): each gets
    its own window's growth, split evenly over the time both were open, and the figures add up
    to what the process grew by."""
    rss = iter([1_000, 1_100, 1_500, 1_600, 2_000, 2_000])  # at each start and end
    ledger = GrowthLedger(read_cpu=lambda: next(rss), read_gpu=dict)
    with ledger.section(on_gpu=False) as a:          # 1_000
        with ledger.section(on_gpu=False) as b:      # 1_100: a alone grew 100
            pass                                     # 1_500: 400 while both ran
        with ledger.section(on_gpu=False) as c:      # 1_600: a alone grew 100
            pass                                     # 2_000: 400 while a and c ran
                                                     # 2_000: a alone grew 0
    assert (a.cpu, b.cpu, c.cpu) == (100 + 200 + 100 + 200, 200, 200)
    assert sum(s.cpu or 0 for s in (a, b, c)) == 2_000 - 1_000


def test_a_gpu_load_beside_a_cpu_load_gets_the_gpu_growth_alone() -> None:
    cpu = iter([0, 10, 30, 40])
    gpu = iter([{0: GpuMemoryReading(100, True)}, {0: GpuMemoryReading(700, True)},
                {0: GpuMemoryReading(700, True)}])
    ledger = GrowthLedger(read_cpu=lambda: next(cpu), read_gpu=lambda: next(gpu))
    with ledger.section(on_gpu=False) as host, ledger.section(on_gpu=True) as device:
        pass
    assert device.gpu == {0: 600} and host.gpu == {}
    assert (host.cpu, device.cpu) == (30, 10)


class _ImportingBackend(FakeBackend):
    """Imports its "framework" in load_instance, as the real backends do."""

    names = ("importing",)
    framework_modules = ("wb_test_heavy_framework",)

    def load_instance(self, config, version_dir, spec):
        importlib.import_module("wb_test_heavy_framework")
        return super().load_instance(config, version_dir, spec)


@pytest.mark.skipif(host_rss_bytes() is None, reason="no /proc/self/statm here")
async def test_a_backends_framework_import_is_not_counted_as_the_model(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    modules = tmp_path / "modules"
    modules.mkdir()
    (modules / "wb_test_heavy_framework.py").write_text(f"WEIGHTS = b'x' * {BIG}\n")  # resident
    monkeypatch.syspath_prepend(str(modules))
    monkeypatch.delitem(sys.modules, "wb_test_heavy_framework", raising=False)
    register_backend("importing", _ImportingBackend)
    repo = tmp_path / "repo"
    write_backend_model(repo, "m", FAKE_CONFIG.format(name="m", count=1, group="")
                        .replace('backend: "fake"', 'backend: "importing"'))
    try:
        async with Server(ServerOptions(model_repository=[str(repo)])) as server:
            (usage,) = server.model_statistics()[0].memory_usage
        assert usage.byte_size < BIG // 2, usage  # the 48 MiB import happened before
    finally:
        sys.modules.pop("wb_test_heavy_framework", None)


async def test_a_python_model_reports_its_stub_process(tmp_path: Path) -> None:
    copy_python_model(tmp_path, "add_sub")
    async with Server(ServerOptions(model_repository=[str(tmp_path)])) as server:
        (usage,) = server.model_statistics()[0].memory_usage
    # the stub's resident set (an interpreter with numpy: megabytes), not the server's growth
    assert (usage.kind, usage.estimate) == ("CPU", False) and usage.byte_size > 5_000_000, usage


async def test_a_torchscript_cpu_model_reports_its_parameters(tmp_path: Path,
                                                               sample_repository: Path) -> None:
    torch = pytest.importorskip("torch")
    shutil.copytree(sample_repository / "digits_torchscript", tmp_path / "digits_torchscript")
    module = torch.jit.load(str(tmp_path / "digits_torchscript" / "1" / "model.pt"))
    weights = sum(t.numel() * t.element_size() for t in (*module.parameters(), *module.buffers()))
    async with Server(ServerOptions(model_repository=[str(tmp_path)])) as server:
        usages = server.model_statistics()[0].memory_usage
    # not torch's runtime set-up (hundreds of MB on a first load): the module's own tensors
    assert usages == [MemoryUsage("CPU", 0, weights, estimate=False)]


def test_sections_with_equal_figures_close_as_themselves() -> None:
    """Two sections open at once with the same figures (both 0 so far) each close as
    themselves: telling them apart by value closed the wrong one, and the other's close
    then failed (ValueError), and with it that model's load."""
    rss = iter([0, 0, 0, 10])
    ledger = GrowthLedger(read_cpu=lambda: next(rss), read_gpu=dict)
    with ledger.section(on_gpu=False) as a, ledger.section(on_gpu=False) as b:
        pass
    assert (a.cpu, b.cpu) == (10, 0)


def _libc_heap() -> ctypes.CDLL | None:
    """glibc's malloc/free (None elsewhere: the heap test needs glibc's reuse of freed chunks)."""
    libc = ctypes.CDLL(None)
    if not hasattr(libc, "malloc_trim"):
        return None
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.restype, libc.free.argtypes = None, [ctypes.c_void_p]
    return libc


@pytest.mark.skipif(host_rss_bytes() is None or _libc_heap() is None, reason="glibc and procfs only")
def test_a_load_reusing_freed_heap_still_counts_its_growth() -> None:
    """Heap that earlier work freed stays resident (glibc keeps it for reuse); a load that
    reuses it grew the process by nothing measurable, so a 48 MiB model once read as 1.7 MiB.
    The ledger releases free heap before reading, so the reuse shows as growth."""
    libc = _libc_heap()
    assert libc is not None
    chunk, count = 64 * 2**10, BIG // (64 * 2**10)  # below glibc's mmap threshold: heap chunks

    def fill() -> list[int]:
        blocks = [libc.malloc(chunk) for _ in range(count)]
        for block in blocks:
            ctypes.memset(block, 1, chunk)  # resident
        return blocks

    earlier = fill()
    pin = libc.malloc(chunk)  # above them: the heap's top cannot be given back on free
    for block in earlier:
        libc.free(block)  # freed, still resident
    ledger, again = GrowthLedger(read_gpu=dict), []
    try:
        with ledger.section(on_gpu=False) as growth:
            again = fill()  # the "load": served from the freed chunks
        assert growth.cpu is not None and growth.cpu >= BIG // 2, growth
    finally:
        for block in (*again, pin):
            libc.free(block)
