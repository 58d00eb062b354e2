"""TensorRT plans through the real Server, on a GPU: minilm_encoder built with ``build_plan``
(dynamic batch and sequence) answering like ONNX Runtime on CPU, auto-complete from the engine,
a two-profile plan whose instances pick a profile per batch, the clear errors (shapes outside
the profile, batches over max_batch_size, a config wanting more than the plan holds, damaged
plans), GPU memory in the statistics, and ``workbench build-plan`` itself.

Needs an NVIDIA GPU, ``tensorrt`` (10.x) and ``cuda-python``; skips cleanly elsewhere. Plans
are built with TF32 off so FP32 outputs match ONNX Runtime within 1e-3.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from tests.gpu.tensorrt_helpers import probe_plans, require_tensorrt, scale_onnx, two_profile_plan

require_tensorrt()

import onnxruntime as ort  # noqa: E402
import tensorrt as trt  # noqa: E402

from workbench import InferenceRequest, InvalidArgument, Server, ServerOptions, Tensor  # noqa: E402
from workbench.config.model_config import parse_model_config  # noqa: E402
from workbench.hosts.cli import main  # noqa: E402
from workbench.tools.build_plan import build_plan, write_model_config  # noqa: E402

TOKENS = ("input_ids", "attention_mask", "token_type_ids")


@pytest.fixture(scope="module")
def minilm(sample_repository: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the minilm_encoder ONNX model, a repository serving its plan as minilm_plan (config
    written by build-plan) and minilm_auto (no config: auto-completed from the engine))."""
    onnx_path = (sample_repository / "minilm_encoder" / "1" / "model.onnx").resolve()
    if not onnx_path.is_file():
        pytest.skip(f"{onnx_path} is not built")
    repo = tmp_path_factory.mktemp("trt_repo")
    plan = repo / "minilm_plan" / "1" / "model.plan"
    tensors = build_plan(onnx_path, plan, min_batch=1, opt_batch=4, max_batch=8,
                         dims={"sequence": (1, 64, 128)}, tf32=False)
    write_model_config(repo / "minilm_plan", "minilm_plan", tensors)
    (repo / "minilm_auto" / "1").mkdir(parents=True)
    (repo / "minilm_auto" / "1" / "model.plan").symlink_to(plan)
    return onnx_path, repo


def _tokens(batch: int, sequence: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = rng.integers(1000, 8000, (batch, sequence), dtype=np.int64)
    mask = np.ones((batch, sequence), np.int64)
    mask[0, sequence // 2:] = 0  # a padded row
    ids[mask == 0] = 0
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}


def _request(model: str, feeds: dict[str, np.ndarray]) -> InferenceRequest:
    return InferenceRequest(model, [Tensor(name, "INT64", array) for name, array in feeds.items()])


async def test_minilm_plan_answers_like_onnx_runtime(minilm: tuple[Path, Path]) -> None:
    onnx_path, repo = minilm
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    async with Server(ServerOptions(model_repository=[str(repo)], exit_on_error=False)) as server:
        rows = {r["name"]: r for r in await server.repository_index()}
        assert rows["minilm_plan"]["state"] == "READY", rows["minilm_plan"]
        assert rows["minilm_auto"]["state"] == "READY", rows["minilm_auto"]
        auto = await server.model_config("minilm_auto")
        assert auto.max_batch_size == 8 and auto.HasField("dynamic_batching")
        assert sorted(i.name for i in auto.input) == sorted(TOKENS)
        assert {o.name for o in auto.output} == {"sentence_embedding", "last_hidden_state"}
        for model, (batch, sequence) in (("minilm_plan", (3, 16)), ("minilm_auto", (1, 128)),
                                         ("minilm_plan", (8, 100))):
            feeds = _tokens(batch, sequence, seed=batch * sequence)
            response = await server.infer(_request(model, feeds))
            got = {t.name: t.data for t in response.outputs}
            want = dict(zip(["sentence_embedding", "last_hidden_state"],
                            session.run(["sentence_embedding", "last_hidden_state"], feeds), strict=True))
            for name, expected in want.items():
                np.testing.assert_allclose(got[name], expected, rtol=1e-3, atol=1e-3, err_msg=name)
        # equal-length requests queued together run as batches and still split back right
        many = [_tokens(1, 32, seed) for seed in range(12)]
        responses = await asyncio.gather(*(server.infer(_request("minilm_plan", f)) for f in many))
        for feeds, response in zip(many, responses, strict=True):
            expected = session.run(["sentence_embedding"], feeds)[0]
            embedding = next(t.data for t in response.outputs if t.name == "sentence_embedding")
            np.testing.assert_allclose(embedding, expected, rtol=1e-3, atol=1e-3)
        stats = (await server.statistics("minilm_plan"))["model_stats"][0]
        gpu = [m for m in stats.get("memory_usage", []) if m["type"] == "GPU"]
        plan_bytes = (repo / "minilm_plan" / "1" / "model.plan").stat().st_size
        assert gpu and gpu[0]["id"] == 0 and gpu[0]["byte_size"] > plan_bytes


async def test_shapes_outside_the_profile_and_oversized_batches_are_clear_errors(
    minilm: tuple[Path, Path],
) -> None:
    _, repo = minilm
    async with Server(ServerOptions(model_repository=[str(repo)], exit_on_error=False)) as server:
        with pytest.raises(InvalidArgument) as long:
            await server.infer(_request("minilm_plan", _tokens(1, 200, 0)))
        assert ("of model 'minilm_plan': model expected the shape of dimension 1 to be between 1 "
                "and 128 but received 200 (optimization profile 0)") in long.value.message
        with pytest.raises(InvalidArgument, match="batch-size must be <= 8"):
            await server.infer(_request("minilm_plan", _tokens(9, 16, 0)))
        fine = await server.infer(_request("minilm_plan", _tokens(2, 16, 0)))
        assert fine.outputs


async def test_a_config_wanting_more_than_the_plan_holds_is_unavailable(
    minilm: tuple[Path, Path], tmp_path: Path,
) -> None:
    _, repo = minilm
    text = (repo / "minilm_plan" / "config.pbtxt").read_text()
    config = parse_model_config(text)
    config.name, config.max_batch_size = "too_big", 16
    (tmp_path / "too_big" / "1").mkdir(parents=True)
    (tmp_path / "too_big" / "config.pbtxt").write_text(str(config))
    (tmp_path / "too_big" / "1" / "model.plan").symlink_to(repo / "minilm_plan" / "1" / "model.plan")
    options = ServerOptions(model_repository=[str(tmp_path)], exit_on_error=False,
                            strict_model_config=True)
    async with Server(options) as server:
        row = (await server.repository_index())[0]
        assert row["state"] == "UNAVAILABLE"
        assert ("configuration specified max-batch 16 but TensorRT engine only supports max-batch 8 "
                "(optimization profile 0") in row["reason"]


async def test_instances_run_each_batch_in_a_fitting_profile(tmp_path: Path) -> None:
    onnx_path = scale_onnx(tmp_path / "scale.onnx")
    plan = two_profile_plan(onnx_path, tmp_path / "repo" / "scale" / "1" / "model.plan",
                            [((1, 1), (4, 16), (8, 32)), ((1, 33), (4, 256), (8, 512))])
    (tmp_path / "repo" / "scale" / "config.pbtxt").write_text(
        'name: "scale"\nplatform: "tensorrt_plan"\n'
        'instance_group [ { kind: KIND_GPU count: 2 profile: [ "0", "1" ] } ]\n')
    (tmp_path / "repo" / "long_only" / "1").mkdir(parents=True)
    (tmp_path / "repo" / "long_only" / "1" / "model.plan").symlink_to(plan)
    (tmp_path / "repo" / "long_only" / "config.pbtxt").write_text(
        'name: "long_only"\nplatform: "tensorrt_plan"\n'
        'instance_group [ { kind: KIND_GPU profile: [ "1" ] } ]\n')
    options = ServerOptions(model_repository=[str(tmp_path / "repo")], exit_on_error=False)
    async with Server(options) as server:
        rows = {r["name"]: r for r in await server.repository_index()}
        assert rows["scale"]["state"] == "READY", rows["scale"]
        config = await server.model_config("scale")
        assert config.max_batch_size == 8
        total = next(o for o in config.output if o.name == "total")
        assert list(total.dims) == [1] and total.HasField("reshape")
        for sequence in (5, 300, 32, 33):
            x = np.random.default_rng(sequence).random((2, sequence), np.float32)
            response = await server.infer(InferenceRequest("scale", [Tensor("x", "FP32", x)]))
            out = {t.name: t.data for t in response.outputs}
            np.testing.assert_allclose(out["y"], 2 * x + 1, rtol=1e-6)
            np.testing.assert_allclose(out["total"], x.sum(axis=1), rtol=1e-5)
        x = np.ones((1, 400), np.float32)
        response = await server.infer(InferenceRequest("long_only", [Tensor("x", "FP32", x)]))
        np.testing.assert_allclose(response.outputs[0].data, 3.0)
        with pytest.raises(InvalidArgument, match=r"between 33 and 512 but received 8 \(optimization profile 1\)"):
            await server.infer(InferenceRequest("long_only", [Tensor("x", "FP32", np.ones((1, 8), np.float32))]))


def test_damaged_plans_fail_with_clear_reasons(tmp_path: Path) -> None:
    """Random bytes, and the plan with its serialization-version word bumped: TensorRT's plan
    layout is not documented, so the version case is tried on the first small word that looks
    like a format tag (200..400) and skipped when TensorRT does not answer with a version."""
    onnx_path = scale_onnx(tmp_path / "scale.onnx")
    good = tmp_path / "good.plan"
    build_plan(onnx_path, good, max_batch=4, dims={"sequence": (1, 8, 16)})
    data = bytearray(good.read_bytes())
    (tmp_path / "random.plan").write_bytes(np.random.default_rng(0).bytes(4096))
    offsets = [o for o in range(4, 64, 4) if 200 <= int.from_bytes(data[o:o + 4], "little") <= 400][:2]
    candidates = []
    for offset in offsets:
        bumped = bytearray(data)
        bumped[offset:offset + 4] = (int.from_bytes(data[offset:offset + 4], "little") + 1).to_bytes(4, "little")
        (tmp_path / f"bumped_{offset}.plan").write_bytes(bumped)
        candidates.append(tmp_path / f"bumped_{offset}.plan")
    reasons = probe_plans([good, tmp_path / "random.plan"])
    if reasons is None:
        pytest.skip(f"TensorRT {trt.__version__} crashed on a random-bytes plan")
    assert reasons[0] == ""
    assert reasons[1].startswith("unable to load model 'probe': the TensorRT plan ") and "random.plan" in reasons[1]
    versions = probe_plans(candidates) if candidates else None
    said = [r for r in versions or [] if "TensorRT version" in r and "build-plan" in r]
    if not said:
        pytest.skip(f"bumping header words {offsets} gave no version message on TensorRT "
                    f"{trt.__version__}: {versions}")
    assert trt.__version__ in said[0]


def test_build_plan_cli_writes_a_plan_and_a_config_the_server_loads(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture) -> None:
    onnx_path = scale_onnx(tmp_path / "scale.onnx")
    plan = tmp_path / "repo" / "scaled" / "1" / "model.plan"
    status = main(["build-plan", str(onnx_path), "-o", str(plan), "--max-batch", "4",
                   "--min-shapes", "x:1x1", "--opt-shapes", "x:2x8", "--max-shapes", "x:4x64",
                   "--config", str(tmp_path / "repo" / "scaled"), "--no-tf32", "--workspace", "256"])
    out = capsys.readouterr().out
    assert status == 0, out
    assert f"wrote {plan}" in out and plan.stat().st_size > 0
    config = parse_model_config((tmp_path / "repo" / "scaled" / "config.pbtxt").read_text())
    assert config.name == "scaled" and config.platform == "tensorrt_plan" and config.max_batch_size == 4

    async def serve() -> np.ndarray:
        options = ServerOptions(model_repository=[str(tmp_path / "repo")], strict_model_config=True)
        async with Server(options) as server:
            x = np.arange(12, dtype=np.float32).reshape(3, 4)
            response = await server.infer(InferenceRequest("scaled", [Tensor("x", "FP32", x)]))
            return next(t.data for t in response.outputs if t.name == "y")

    np.testing.assert_allclose(asyncio.run(serve()), 2 * np.arange(12, dtype=np.float32).reshape(3, 4) + 1)
