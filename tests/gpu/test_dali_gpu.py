"""DALI on the GPU through the real Server: the dali backend's KIND_GPU path (``device_id`` = the
group's GPU instead of CPU-only ``device_id=None``).

- the sample ``digits_jpeg_preprocess`` (CPU operators) as a KIND_GPU instance on GPU 0 gives the
  KIND_CPU instance's pixels exactly;
- the same recipe with GPU decoding (``fn.decoders.image(device="mixed")``: nvJPEG, then the
  resize on the GPU, outputs copied back from device memory) as KIND_GPU answers like the CPU
  pipeline within 0.5 of 16 (nvJPEG's IDCT may round differently from libjpeg-turbo), the digits
  classified alike, a corrupt JPEG is InvalidArgument and the next request works.

Needs a CUDA GPU and ``nvidia.dali`` (nvidia-dali-cuda120, in the ``dev`` extra).
"""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

import numpy as np
import pytest

from tests.gpu.gpu_support import assert_ready, copy_sample, kind_gpu, require_gpu

require_gpu("nvidia.dali")

from nvidia.dali import fn, pipeline_def, types  # noqa: E402
from PIL import Image  # noqa: E402

from workbench import InferenceRequest, Server, ServerOptions, Tensor  # noqa: E402
from workbench.common.errors import InvalidArgument  # noqa: E402

SAMPLE = "digits_jpeg_preprocess"


def _digit_jpegs(n: int) -> tuple[list[bytes], np.ndarray]:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    _, x_test, _, _ = train_test_split(x, y, test_size=0.25, random_state=0)
    jpegs = []
    for pixels in x_test[:n]:
        gray = np.clip(np.round(pixels.reshape(8, 8) * 255 / 16), 0, 255).astype(np.uint8)
        image = Image.fromarray(gray, mode="L").resize((32, 32), Image.Resampling.NEAREST)
        buffer = io.BytesIO()
        image.save(buffer, format="JPEG", quality=90)
        jpegs.append(buffer.getvalue())
    return jpegs, x_test[:n].astype(np.float32)


def mixed_pipeline():
    """The sample's recipe with nvJPEG decoding ("mixed") and the resize on the GPU."""
    @pipeline_def(batch_size=64, num_threads=1, device_id=0)
    def pipe():
        jpegs = fn.external_source(name="IMAGE", dtype=types.UINT8, ndim=1)
        images = fn.decoders.image(jpegs, device="mixed", output_type=types.GRAY)
        images = fn.resize(images, resize_x=8, resize_y=8, interp_type=types.INTERP_LINEAR,
                           antialias=False, dtype=types.FLOAT)
        return fn.reshape(images * (16.0 / 255.0), shape=[64])
    return pipe()


async def _pixels(server: Server, model: str, jpegs: list[bytes]) -> np.ndarray:
    async def one(data: bytes) -> np.ndarray:
        array = np.frombuffer(data, np.uint8).reshape(1, -1)
        response = await server.infer(InferenceRequest(model, [Tensor("IMAGE", "UINT8", array)]))
        return response.outputs[0].data[0]
    return np.stack(await asyncio.gather(*(one(j) for j in jpegs)))


@pytest.fixture
def repo(tmp_path: Path, sample_repository: Path) -> Path:
    copy_sample(sample_repository, tmp_path, SAMPLE, "dali_cpu")
    copy_sample(sample_repository, tmp_path, SAMPLE, "dali_gpu", kind_gpu)
    mixed = copy_sample(sample_repository, tmp_path, SAMPLE, "dali_mixed", kind_gpu)
    version = mixed / "1"
    version.unlink()  # a link to the sample's version folder: give this model its own
    version.mkdir()
    mixed_pipeline().serialize(filename=str(version / "model.dali"))
    return tmp_path


async def test_kind_gpu_and_mixed_decoding_answer_like_cpu(repo: Path) -> None:
    jpegs, digits = _digit_jpegs(48)
    async with Server(ServerOptions(model_repository=[str(repo)])) as server:
        await assert_ready(server, "dali_cpu", "dali_gpu", "dali_mixed")
        cpu = await _pixels(server, "dali_cpu", jpegs)
        gpu = await _pixels(server, "dali_gpu", jpegs)
        mixed = await _pixels(server, "dali_mixed", jpegs)
        with pytest.raises(InvalidArgument):
            await _pixels(server, "dali_mixed", [jpegs[0][:40] + b"\x00" * 100])
        again = await _pixels(server, "dali_mixed", jpegs[:2])
    np.testing.assert_allclose(cpu, digits, atol=0.5)
    np.testing.assert_array_equal(gpu, cpu)
    np.testing.assert_allclose(mixed, cpu, atol=0.5)
    np.testing.assert_allclose(again, mixed[:2], atol=1e-6)
