"""Shared pieces of the GPU-only tests (tests/gpu): module skips with a clear reason, and
temporary repositories holding sample models with edited configs (KIND_GPU, accelerators).

Every GPU test module calls :func:`require_gpu` at import, before it touches a GPU library or
a sample model, so on a machine without a GPU the whole module is one clean SKIP (and the
sample models are never built for it). ``tests/gpu/run_gpu_checks.sh`` runs these modules.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig, ModelInstanceGroup

from workbench import InferenceRequest, Server, Tensor
from workbench.config.model_config import read_model_config
from workbench.gpu.devices import gpu_count


def require_gpu(*modules: str) -> None:
    """Skip the calling test module unless a CUDA GPU is visible and every module imports.

    Call at module level. Reasons name what is missing ("no CUDA GPU visible ...",
    "torch does not import: ..."), as the check script's table reports them.
    """
    if gpu_count() == 0:
        pytest.skip("no CUDA GPU visible (the CUDA driver reports 0 devices)", allow_module_level=True)
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - ImportError, or a GPU build missing CUDA libraries: skip, say why
            pytest.skip(f"{name} does not import: {exc}", allow_module_level=True)


def kind_gpu(config: ModelConfig, count: int = 1, device: int = 0) -> None:
    """Replace the instance groups with one KIND_GPU group of ``count`` on ``device``."""
    del config.instance_group[:]
    config.instance_group.add(kind=ModelInstanceGroup.KIND_GPU, count=count, gpus=[device])


def add_gpu_accelerator(config: ModelConfig, name: str, **parameters: str) -> None:
    """Add ``optimization.execution_accelerators.gpu_execution_accelerator { name ... }``."""
    accelerator = config.optimization.execution_accelerators.gpu_execution_accelerator.add(name=name)
    accelerator.parameters.update(parameters)


def copy_sample(samples: Path, repo: Path, model: str, name: str,
                edit: Callable[[ModelConfig], None] = lambda config: None) -> Path:
    """``repo/name``: sample ``model``'s version folders (linked, never copied or written)
    with its config renamed to ``name`` and changed by ``edit``. Returns the model folder."""
    source = samples / model
    config = read_model_config(source)
    assert config is not None, f"{source} has no config.pbtxt"
    config.name = name
    edit(config)
    target = repo / name
    target.mkdir(parents=True)
    for version in source.iterdir():
        if version.is_dir() and version.name.isdigit():
            (target / version.name).symlink_to(version.resolve(), target_is_directory=True)
    (target / "config.pbtxt").write_text(text_format.MessageToString(config))
    return target


async def infer(server: Server, model: str, inputs: dict[str, np.ndarray], version: str = "1") -> dict[str, np.ndarray]:
    """One request through ``Server.infer``; outputs by name."""
    wire = {np.dtype(np.float32): "FP32", np.dtype(np.int64): "INT64"}
    tensors = [Tensor(name, wire[array.dtype], array) for name, array in inputs.items()]
    response = await server.infer(InferenceRequest(model, tensors, model_version=version))
    return {tensor.name: tensor.data for tensor in response.outputs}


async def assert_ready(server: Server, *models: str) -> None:
    """Fail with the load reason (not a later inference error) if a model is not READY."""
    rows = [row for row in await server.repository_index() if row["name"] in models]
    not_ready = [row for row in rows if row.get("state") != "READY"]
    assert rows and not not_ready, not_ready


def digits_pixels(batch: int = 8) -> dict[str, np.ndarray]:
    """``pixels`` [batch, 64] FP32 in the digits data set's range 0..16."""
    rng = np.random.default_rng(6)
    return {"pixels": rng.integers(0, 17, size=(batch, 64)).astype(np.float32)}


def minilm_tokens(batch: int = 2, length: int = 16) -> dict[str, np.ndarray]:
    """MiniLM inputs [batch, length] INT64: token ids from the vocabulary's word range."""
    rng = np.random.default_rng(6)
    ids = rng.integers(1000, 20000, size=(batch, length), dtype=np.int64)
    ids[:, 0], ids[:, -1] = 101, 102  # [CLS] ... [SEP]
    return {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
