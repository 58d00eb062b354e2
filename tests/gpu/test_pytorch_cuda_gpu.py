"""PyTorch on CUDA through the real Server: digits_torchscript as a KIND_GPU instance answers
like the KIND_CPU one, and reports its weights as its GPU memory usage (Triton's
``memory_usage``: type GPU, id 0), once per module even when instances share weights.

Needs a GPU and a CUDA build of torch (``torch.cuda.is_available()``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.gpu.gpu_support import assert_ready, copy_sample, digits_pixels, infer, kind_gpu, require_gpu

require_gpu("torch")

import torch  # noqa: E402

from workbench import Server, ServerOptions  # noqa: E402
from workbench.common.results import MemoryUsage, ModelStatisticsReport  # noqa: E402

if not torch.cuda.is_available():
    pytest.skip(f"torch {torch.__version__} sees no CUDA device (a CPU build?)", allow_module_level=True)

MODEL = "digits_torchscript"


@pytest.fixture(scope="module")
def repo(sample_repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``<model>_cpu`` (its own config), ``<model>_gpu`` (one KIND_GPU instance on GPU 0) and
    ``<model>_shared`` (two KIND_GPU instances with ENABLE_WEIGHT_SHARING)."""
    repo = tmp_path_factory.mktemp("torch_gpu")
    copy_sample(sample_repository, repo, MODEL, f"{MODEL}_cpu")
    copy_sample(sample_repository, repo, MODEL, f"{MODEL}_gpu", kind_gpu)

    def shared(config) -> None:
        kind_gpu(config, count=2)
        config.parameters["ENABLE_WEIGHT_SHARING"].string_value = "true"

    copy_sample(sample_repository, repo, MODEL, f"{MODEL}_shared", shared)
    return repo


def weight_bytes(repo: Path) -> int:
    """Bytes of the TorchScript module's parameters and buffers (loaded on the CPU)."""
    module = torch.jit.load(str(repo / f"{MODEL}_cpu" / "1" / "model.pt"), map_location="cpu")
    return sum(t.numel() * t.element_size() for t in (*module.parameters(), *module.buffers()))


def gpu_entries(stats: ModelStatisticsReport, model: str) -> list[MemoryUsage]:
    (row,) = [s for s in stats["model_stats"] if s["name"] == model]
    return [m for m in row["memory_usage"] if m["type"] == "GPU"]


async def test_kind_gpu_answers_like_cpu_and_reports_its_weights(repo: Path) -> None:
    names = [f"{MODEL}_cpu", f"{MODEL}_gpu", f"{MODEL}_shared"]
    options = ServerOptions(model_repository=[str(repo)], model_control_mode="explicit",
                            load_model=names)
    inputs = {"INPUT__0": digits_pixels(16)["pixels"]}
    async with Server(options) as server:
        await assert_ready(server, *names)
        expected = await infer(server, names[0], inputs)
        got = await infer(server, names[1], inputs)
        shared = await infer(server, names[2], inputs)
        stats = await server.statistics()
    np.testing.assert_allclose(got["OUTPUT__0"], expected["OUTPUT__0"], rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(shared["OUTPUT__0"], got["OUTPUT__0"], rtol=1e-6, atol=1e-6)
    size = weight_bytes(repo)
    assert size > 0
    # backend-reported bytes win over the NVML growth (which would add the CUDA context)
    assert gpu_entries(stats, names[1]) == [{"type": "GPU", "id": 0, "byte_size": size}]
    # two instances sharing one module: its weights once
    assert gpu_entries(stats, names[2]) == [{"type": "GPU", "id": 0, "byte_size": size}]
    assert gpu_entries(stats, names[0]) == []
