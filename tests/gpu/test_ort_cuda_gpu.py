"""ONNX Runtime on the GPU through the real Server: digits_mlp and minilm_encoder as KIND_GPU
instances with Triton's ``gpu_execution_accelerator`` ``cuda`` (CUDA execution provider) and
``tensorrt`` (TensorRT execution provider), answering like the same model on KIND_CPU.

Needs a GPU and onnxruntime-gpu (the CUDA provider); the TensorRT cases also need ORT's
TensorRT provider and the ``tensorrt`` package. GPU matmuls may use TF32 (ORT's CUDA provider
and TensorRT do by default), so outputs are compared within 2e-2 and by cosine similarity, and
the digits' predicted classes must agree exactly.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from tests.gpu.gpu_support import (
    add_gpu_accelerator,
    assert_ready,
    copy_sample,
    digits_pixels,
    infer,
    kind_gpu,
    minilm_tokens,
    require_gpu,
)

require_gpu("onnxruntime")

import onnxruntime as ort  # noqa: E402
from tritonclient.grpc.model_config_pb2 import ModelInstanceGroup  # noqa: E402

from workbench import Server, ServerOptions  # noqa: E402

PROVIDERS = ort.get_available_providers()
if "CUDAExecutionProvider" not in PROVIDERS:
    pytest.skip(f"onnxruntime {ort.__version__} has no CUDAExecutionProvider (providers: "
                f"{', '.join(PROVIDERS)}): install onnxruntime-gpu", allow_module_level=True)
TENSORRT_MISSING = ("" if "TensorrtExecutionProvider" in PROVIDERS else
                    f"onnxruntime {ort.__version__} has no TensorrtExecutionProvider")
if not TENSORRT_MISSING and importlib.util.find_spec("tensorrt") is None:
    TENSORRT_MISSING = "the tensorrt package is not installed (pip install tensorrt-cu12)"

MODELS = {"digits_mlp": digits_pixels, "minilm_encoder": minilm_tokens}
ACCELERATORS = [
    pytest.param("cuda", id="cuda"),
    pytest.param("tensorrt", id="tensorrt",
                 marks=pytest.mark.skipif(bool(TENSORRT_MISSING), reason=TENSORRT_MISSING or "-")),
]


@pytest.fixture(scope="module")
def repo(sample_repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Per sample: ``<model>_cpu`` (its own config) and ``<model>_cuda`` / ``<model>_tensorrt``
    (one KIND_GPU instance on GPU 0 with that accelerator)."""
    repo = tmp_path_factory.mktemp("ort_gpu")
    for model in MODELS:
        copy_sample(sample_repository, repo, model, f"{model}_cpu")
        for accelerator in ("cuda", "tensorrt"):
            def edit(config, accelerator=accelerator):
                kind_gpu(config)
                add_gpu_accelerator(config, accelerator)
            copy_sample(sample_repository, repo, model, f"{model}_{accelerator}", edit)
    return repo


@pytest.mark.parametrize("accelerator", ACCELERATORS)
@pytest.mark.parametrize("model", list(MODELS))
async def test_gpu_instance_answers_like_cpu(repo: Path, model: str, accelerator: str) -> None:
    cpu, gpu = f"{model}_cpu", f"{model}_{accelerator}"
    inputs = MODELS[model]()
    options = ServerOptions(model_repository=[str(repo)], model_control_mode="explicit",
                            load_model=[cpu, gpu])
    async with Server(options) as server:
        await assert_ready(server, cpu, gpu)
        kind = (await server.model_config(gpu)).instance_group[0].kind
        expected = await infer(server, cpu, inputs)
        got = await infer(server, gpu, inputs)
        again = await infer(server, gpu, inputs)  # a built engine / warm session answers the same
    assert kind == ModelInstanceGroup.KIND_GPU
    assert got.keys() == expected.keys()
    for name, reference in expected.items():
        assert got[name].shape == reference.shape, name
        np.testing.assert_allclose(got[name], reference, rtol=2e-2, atol=2e-2, err_msg=name)
        np.testing.assert_allclose(again[name], got[name], rtol=1e-4, atol=1e-4, err_msg=name)
    if model == "digits_mlp":
        np.testing.assert_array_equal(got["logits"].argmax(1), expected["logits"].argmax(1))
    else:
        a, b = got["sentence_embedding"], expected["sentence_embedding"]
        cosine = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
        assert cosine.min() > 0.999, cosine
