"""Model warmup (Triton's ``model_warmup``): samples run on each instance before READY."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from workbench import InferenceRequest, InvalidArgument, InvalidModelConfig, Server, ServerOptions, Tensor
from workbench.backends.registry import register_backend
from workbench.config.model_config import parse_model_config
from workbench.config.validate_warmup import check_model_warmup
from workbench.testing.fake_backend import BEHAVIOUR, FakeBackend, write_fake_model
from workbench.testing.models import ADD_SUB_CONFIG, add_sub_graph, write_model
from workbench.testing.repeat_backend import RepeatBackend, write_repeat_model


def sample(name: str, data: str, batch_size: int = 1, count: int = 0, key: str = "INPUT0",
           data_type: str = "TYPE_FP32", dims: str = "1") -> str:
    return (f'model_warmup [ {{ name: "{name}" batch_size: {batch_size} count: {count} '
            f'inputs {{ key: "{key}" value: {{ data_type: {data_type} dims: [ {dims} ] {data} }} }} }} ]')


@pytest.fixture
def fake(tmp_path: Path):
    """``write(extra, count=2)`` -> a repository with the fake model ``fake`` (2 instances)."""
    register_backend("fake", FakeBackend)
    BEHAVIOUR.reset()

    def write(extra: str, count: int = 2, name: str = "fake") -> Path:
        write_fake_model(tmp_path, name, count=count, extra=extra)
        return tmp_path

    yield write
    BEHAVIOUR.reset()


def explicit(repo: Path, *models: str) -> Server:
    return Server(ServerOptions(model_repository=[str(repo)], model_control_mode="explicit",
                                load_model=list(models)))


async def no_statistics(server: Server, model: str) -> None:
    [stats] = (await server.statistics(model))["model_stats"]
    assert (stats["inference_count"], stats["execution_count"]) == (0, 0)
    assert stats["inference_stats"]["success"]["count"] == 0 and stats["batch_stats"] == []


# ----------------------------------------------------------------- running samples
async def test_zero_data_runs_count_times_on_each_instance_before_ready(fake) -> None:
    repo = fake(sample("zeros", "zero_data: true", batch_size=3, count=2))
    async with explicit(repo, "fake") as server:
        assert await server.model_ready("fake")
        # 2 executions per instance, each one batch of 3 requests of batch size 1, zeros
        assert BEHAVIOUR.executions == {"fake_0_0": 2, "fake_0_1": 2}
        assert BEHAVIOUR.batches == [[0.0, 0.0, 0.0]] * 4
        await no_statistics(server, "fake")  # warmup is not inference
        response = await server.infer(InferenceRequest(
            "fake", [Tensor("INPUT0", "FP32", np.full((1, 1), 5, np.float32))]))
        assert float(response.outputs[0].data[0, 0]) == 5.0
        [stats] = (await server.statistics("fake"))["model_stats"]
        assert (stats["inference_count"], stats["execution_count"]) == (1, 1)


async def test_count_zero_means_once_and_batch_size_zero_is_skipped(fake) -> None:
    extra = ('model_warmup [ { name: "once" batch_size: 1 inputs { key: "INPUT0" value: '
             '{ data_type: TYPE_FP32 dims: [ 1 ] zero_data: true } } }, '
             '{ name: "skipped" batch_size: 0 inputs { key: "INPUT0" value: '
             '{ data_type: TYPE_FP32 dims: [ 1 ] zero_data: true } } } ]')
    async with explicit(fake(extra, count=1), "fake") as server:
        assert await server.model_ready("fake")
        assert BEHAVIOUR.executions == {"fake_0_0": 1}


async def test_random_data_is_random_floats_in_unit_interval(fake) -> None:
    repo = fake(sample("random", "random_data: true", batch_size=4, count=5), count=1)
    async with explicit(repo, "fake") as server:
        assert await server.model_ready("fake")
    values = [v for batch in BEHAVIOUR.batches for v in batch]
    assert len(values) == 20 and all(0.0 < v < 1.0 for v in values)  # not zeros
    assert len(set(values)) == 1  # one random buffer per sample, as Triton's


async def test_input_data_file_is_read_from_the_model_warmup_folder(fake) -> None:
    repo = fake(sample("file", 'input_data_file: "raw_input"', batch_size=2), count=1)
    (repo / "fake" / "warmup").mkdir()
    # 7.5 then trailing bytes: a longer file is cut to the tensor's size (Triton)
    (repo / "fake" / "warmup" / "raw_input").write_bytes(np.float32(7.5).tobytes() + b"\0\0\0\0")
    async with explicit(repo, "fake") as server:
        assert await server.model_ready("fake")
        index = await server.repository_index()
        assert [r["version"] for r in index if r["name"] == "fake"] == ["1"]  # warmup/ is no version
    assert BEHAVIOUR.batches == [[7.5, 7.5]]


async def test_failing_sample_makes_the_version_unavailable_others_serve(fake) -> None:
    repo = fake(sample("bad sample", 'input_data_file: "raw"'), count=2)
    write_fake_model(repo, "healthy", count=1)
    (repo / "fake" / "warmup").mkdir()
    (repo / "fake" / "warmup" / "raw").write_bytes(np.float32(-1).tobytes())
    BEHAVIOUR.error_values.add(-1.0)
    async with explicit(repo, "healthy") as server:
        with pytest.raises(InvalidArgument) as error:
            await server.load_model("fake")
        reason = "failed to run warmup sample 'bad sample': fake error for value -1; "
        assert error.value.message == (
            f"load failed for model 'fake': version 1 is at UNAVAILABLE state: {reason};")
        rows = {r["name"]: r for r in await server.repository_index()}
        assert rows["fake"]["state"] == "UNAVAILABLE" and rows["fake"]["reason"] == reason
        assert not await server.model_ready("fake")
        assert BEHAVIOUR.executions == {"fake_0_0": 1}  # the first failing instance ends the load
        assert await server.model_ready("healthy")
        await server.infer(InferenceRequest(
            "healthy", [Tensor("INPUT0", "FP32", np.ones((1, 1), np.float32))]))


async def test_failing_warmup_at_startup_fails_with_exit_on_error(fake) -> None:
    from workbench import ModelLoadError

    repo = fake(sample("s", "zero_data: true"), count=1)
    BEHAVIOUR.error_values.add(0.0)
    with pytest.raises(ModelLoadError, match="failed to run warmup sample 's': fake error for value 0; "):
        async with Server(ServerOptions(model_repository=[str(repo)])):
            pass


async def test_missing_or_short_warmup_file_fails_the_model(fake) -> None:
    repo = fake(sample("s", 'input_data_file: "raw"', dims="4"), count=1)
    (repo / "fake" / "config.pbtxt").write_text(
        (repo / "fake" / "config.pbtxt").read_text().replace("dims: [ 1 ]", "dims: [ 4 ]"))
    async with explicit(repo) as server:
        with pytest.raises(InvalidArgument, match="model_warmup sample 's' of model 'fake': "
                           "failed to read input_data_file 'warmup/raw' of input 'INPUT0'"):
            await server.load_model("fake")
        (repo / "fake" / "warmup").mkdir()
        (repo / "fake" / "warmup" / "raw").write_bytes(b"\0" * 10)
        with pytest.raises(InvalidArgument, match="warmup setting expects 16 bytes, but the data "
                           "provided from raw only has 10 bytes"):
            await server.load_model("fake")
        assert BEHAVIOUR.executions == {}  # no instance was created for a bad sample


async def test_decoupled_model_warmup_waits_for_final_responses(tmp_path: Path) -> None:
    register_backend("repeat", RepeatBackend)
    folder = write_repeat_model(tmp_path)
    config = folder / "config.pbtxt"
    config.write_text(config.read_text() + sample(
        "three", 'input_data_file: "in"', key="IN", data_type="TYPE_INT32", dims="3"))
    (folder / "warmup").mkdir()
    (folder / "warmup" / "in").write_bytes(np.array([1, 2, 3], np.int32).tobytes())
    async with explicit(tmp_path, "repeat") as server:
        assert await server.model_ready("repeat")
        (folder / "warmup" / "in").write_bytes(np.array([1, -2, 3], np.int32).tobytes())
        with pytest.raises(InvalidArgument, match="failed to run warmup sample 'three': "
                           "negative value -2 at 1; "):
            await server.load_model("repeat")
        assert await server.model_ready("repeat")  # the failed reload left the old version


# ----------------------------------------------------------------- a real ONNX model
async def test_warmup_on_a_real_onnx_model(tmp_path: Path) -> None:
    warmup = (
        'model_warmup [ { name: "zeros" batch_size: 8 count: 2 '
        'inputs { key: "INPUT0" value: { data_type: TYPE_FP32 dims: [ 16 ] zero_data: true } } '
        'inputs { key: "INPUT1" value: { data_type: TYPE_FP32 dims: [ 16 ] random_data: true } } }, '
        '{ name: "file" batch_size: 1 '
        'inputs { key: "INPUT0" value: { data_type: TYPE_FP32 dims: [ 16 ] input_data_file: "ones" } } '
        'inputs { key: "INPUT1" value: { data_type: TYPE_FP32 dims: [ 16 ] input_data_file: "ones" } } } ]'
    )
    folder = write_model(tmp_path, "add_sub", ADD_SUB_CONFIG + warmup, add_sub_graph())
    (folder / "warmup").mkdir()
    (folder / "warmup" / "ones").write_bytes(np.ones(16, np.float32).tobytes())
    async with Server(ServerOptions(model_repository=[str(tmp_path)])) as server:
        assert await server.model_ready("add_sub")
        await no_statistics(server, "add_sub")
        a = np.arange(16, dtype=np.float32).reshape(1, 16)
        response = await server.infer(InferenceRequest(
            "add_sub", [Tensor("INPUT0", "FP32", a), Tensor("INPUT1", "FP32", a)]))
        np.testing.assert_array_equal(response.outputs[0].data, a + a)
        # a too-short file fails the onnx model too, with the file's name
        (folder / "warmup" / "ones").write_bytes(b"\0" * 8)
    async with Server(ServerOptions(model_repository=[str(tmp_path)], exit_on_error=False)) as server:
        rows = await server.repository_index()
        assert "warmup setting expects 64 bytes, but the data provided from ones only has 8 bytes" \
            in rows[0]["reason"]


async def test_warmup_failure_from_the_onnx_backend_is_the_reason(tmp_path: Path) -> None:
    config = ADD_SUB_CONFIG.replace("dims: [ 16 ]", "dims: [ -1 ]")
    warmup = ('model_warmup [ { name: "z" batch_size: 1 '
              'inputs { key: "INPUT0" value: { data_type: TYPE_FP32 dims: [ 16 ] zero_data: true } } '
              'inputs { key: "INPUT1" value: { data_type: TYPE_FP32 dims: [ 8 ] zero_data: true } } } ]')
    write_model(tmp_path, "add_sub", config + warmup, add_sub_graph(width="W"))
    async with Server(ServerOptions(model_repository=[str(tmp_path)], exit_on_error=False)) as server:
        [row] = await server.repository_index()
        assert row["state"] == "UNAVAILABLE"
        assert row["reason"].startswith("failed to run warmup sample 'z': onnxruntime failed to run "
                                        "model 'add_sub'")


# ----------------------------------------------------------------- config validation
FAKE = """
name: "m" backend: "fake" max_batch_size: 4
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1, 3 ] },
        { name: "OPT" data_type: TYPE_INT32 dims: [ 1 ] optional: true } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1, 3 ] } ]
"""


def check(extra: str, base: str = FAKE) -> None:
    check_model_warmup(parse_model_config(base + extra))


@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        (sample("s", "zero_data: true", key="NOPE", dims="2, 3"),
         "unexpected inference input 'NOPE' for model 'm'"),
        (sample("s", "zero_data: true", dims="2, 4"),
         "unexpected shape for input 'INPUT0' for model 'm'. Expected [-1,3], got [2,4]"),
        (sample("s", "zero_data: true", dims="6"),
         "unexpected shape for input 'INPUT0' for model 'm'. Expected [-1,3], got [6]"),
        (sample("s", "zero_data: true", dims="-1, 3"),
         "warmup setting expects all variable-size dimensions are specified for input 'INPUT0'"),
        (sample("s", "zero_data: true", data_type="TYPE_INT32", dims="2, 3"),
         "inference input 'INPUT0' data-type is 'INT32', but model 'm' expects 'FP32'"),
        (sample("s", "", dims="2, 3"),
         "warmup setting expects input 'INPUT0' to have input_data_type set"),
        (sample("s", "zero_data: true", batch_size=5, dims="2, 3"),
         "batch_size 5 must be <= max_batch_size 4"),
        (sample("s", 'input_data_file: "../../etc/passwd"', dims="2, 3"),
         "input_data_file '../../etc/passwd' of input 'INPUT0' must be a file name inside"),
        (sample("s", 'input_data_file: "/etc/passwd"', dims="2, 3"),
         "input_data_file '/etc/passwd' of input 'INPUT0' must be a file name inside"),
        (sample("s", "zero_data: true", key="OPT", data_type="TYPE_INT32"),
         "missing required input(s) ['INPUT0']"),
    ],
)
def test_invalid_warmup_samples_fail_validation(extra: str, reason: str) -> None:
    with pytest.raises(InvalidModelConfig) as error:
        check(extra)
    assert error.value.message.startswith("model_warmup sample 's' of model 'm': ")
    assert reason in error.value.message


def test_valid_samples_and_sequence_controls_pass() -> None:
    check(sample("s", "random_data: true", batch_size=4, dims="2, 3"))
    check(sample("s", 'input_data_file: "sub/raw"', dims="7, 3"))
    sequence = FAKE + ('sequence_batching { control_input [ { name: "START" control [ '
                       '{ kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] } ] }')
    check('model_warmup [ { name: "s" batch_size: 1 inputs [ '
          '{ key: "INPUT0" value: { data_type: TYPE_FP32 dims: [ 1, 3 ] zero_data: true } }, '
          '{ key: "START" value: { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true } } ] } ]',
          base=sequence)
    unbatched = FAKE.replace("max_batch_size: 4", "max_batch_size: 0")
    with pytest.raises(InvalidModelConfig, match="batch_size 2 must be <= 1 for a model with "
                       "max_batch_size 0"):
        check(sample("s", "zero_data: true", batch_size=2, dims="2, 3"), base=unbatched)


def test_ensembles_cannot_warm_up() -> None:
    from workbench.config.validate import validate_model_config

    config = parse_model_config(
        'name: "e" platform: "ensemble" max_batch_size: 1 '
        'input [ { name: "I" data_type: TYPE_FP32 dims: [ 1 ] } ] '
        'output [ { name: "O" data_type: TYPE_FP32 dims: [ 1 ] } ] '
        'ensemble_scheduling { step [ { model_name: "m" model_version: -1 '
        'input_map { key: "INPUT0" value: "I" } output_map { key: "OUTPUT0" value: "O" } } ] } '
        + sample("s", "zero_data: true", key="I"))
    with pytest.raises(InvalidModelConfig, match="model_warmup can not be specified for ensemble 'e'"):
        validate_model_config(config, "e")


STRINGS = """
name: "s" backend: "fake" max_batch_size: 2
input [ { name: "IN" data_type: TYPE_STRING dims: [ 2 ] } ]
output [ { name: "OUT" data_type: TYPE_STRING dims: [ 2 ] } ]
model_warmup [
  { name: "file" batch_size: 1
    inputs { key: "IN" value: { data_type: TYPE_STRING dims: [ 2 ] input_data_file: "strings" } } },
  { name: "random" batch_size: 1
    inputs { key: "IN" value: { data_type: TYPE_STRING dims: [ 2 ] random_data: true } } }
]
"""


def test_bytes_warmup_file_is_length_prefixed(tmp_path: Path) -> None:
    from workbench.engine.models.warmup import prepare_warmup

    config = parse_model_config(STRINGS)
    (tmp_path / "warmup").mkdir()
    encoded = b"".join(struct.pack("<I", len(s)) + s for s in (b"233", b""))
    (tmp_path / "warmup" / "strings").write_bytes(encoded)
    file_sample, random_sample = prepare_warmup(config, tmp_path)
    assert file_sample.inputs["IN"].tolist() == [[b"233", b""]]  # batch dim 1 prepended
    assert random_sample.inputs["IN"].tolist() == [[b"", b""]]  # random BYTES = zero data
    (tmp_path / "warmup" / "strings").write_bytes(encoded[:7])
    with pytest.raises(InvalidModelConfig, match="expects 2 string elements for input 'IN', "
                       "but the data provided from strings has 1"):
        prepare_warmup(config, tmp_path)
