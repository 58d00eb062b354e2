"""The pytorch backend (TorchScript, ``platform: "pytorch_libtorch"``) on a real Server.

Tiny TorchScript models are scripted here into a temporary repository: Triton's naming
conventions (INPUT__0 / forward() argument names / a Dict input), datatypes, List[str] for
BYTES, runtime failures, load-time config checks, dynamic batching, parameters and devices.
"""

from __future__ import annotations

import asyncio
import logging
import re
import subprocess
import sys
import threading
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest

from workbench import InferenceRequest, RequestedOutput, Server, ServerOptions, Tensor
from workbench.common.errors import WorkbenchError

if TYPE_CHECKING:
    import torch
else:
    torch = pytest.importorskip("torch")

# after the importorskip: these import torch
from workbench.backends import pytorch as pytorch_backend
from workbench.backends import pytorch_options

# --- models (module level: TorchScript needs their source) ---------------------------------------


class AddSub(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return a + b, a - b


class DictProduct(torch.nn.Module):
    def forward(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        return inputs["x"] * inputs["y"]


class FlipAll(torch.nn.Module):
    """Nine inputs of nine datatypes, each returned reversed along its last dim."""

    def forward(self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, d: torch.Tensor,
                e: torch.Tensor, f: torch.Tensor, g: torch.Tensor, h: torch.Tensor,
                i: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor,
                                          torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor,
                                          torch.Tensor]:
        return (a.flip(-1), b.flip(-1), c.flip(-1), d.flip(-1), e.flip(-1), f.flip(-1),
                g.flip(-1), h.flip(-1), i.flip(-1))


class Upper(torch.nn.Module):
    def forward(self, text: list[str]) -> list[str]:
        return [t.upper() for t in text]


class FailsOnNegative(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if bool(x.sum() < 0):
            raise ValueError("negative input")
        return x * 2


class WrongOutputs(torch.nn.Module):
    """OUTPUT__0: one column too many; OUTPUT__1: FP64 where the config says FP32."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.cat([x, x[:, :1]], dim=1), x.double()


class GradProbe(torch.nn.Module):
    """1 where autograd is on, +10 where the computation ran in inference mode."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.ones_like(x)  # created here: an inference tensor under inference_mode()
        return x * 0 + float(torch.is_grad_enabled()) + 10.0 * float(y.is_inference())


class ReturnsDict(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"y": x}


class Accumulate(torch.nn.Module):
    """Running sum: forward(INPUT__0, START__1, SUM__2) -> (OUTPUT__0, SUM__1)."""

    def forward(self, x: torch.Tensor, start: torch.Tensor,
                total: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = (1 - start) * total + x
        return out, out


class Scaled(torch.nn.Module):
    """Traced (not scripted): forward's argument is named ``x`` in the TorchScript schema."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x)


def save_torchscript(module: torch.nn.Module, path: Path, example: tuple | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch 2.13 deprecates TorchScript
        scripted = torch.jit.trace(module, example) if example else torch.jit.script(module)
        scripted.save(str(path))


def write_torch_model(repo: Path, name: str, config: str, module: torch.nn.Module | None,
                      example: tuple | None = None) -> Path:
    model_dir = repo / name
    (model_dir / "1").mkdir(parents=True)
    if config:
        (model_dir / "config.pbtxt").write_text(config)
    if module is not None:
        save_torchscript(module, model_dir / "1" / "model.pt", example)
    return model_dir


def io(name: str, dtype: str, dims: str) -> str:
    return f'{{ name: "{name}" data_type: {dtype} dims: [ {dims} ] }}'


def config(name: str, inputs: list[str], outputs: list[str], max_batch_size: int = 8,
           extra: str = "") -> str:
    return (f'name: "{name}"\nplatform: "pytorch_libtorch"\nmax_batch_size: {max_batch_size}\n'
            f"input [ {', '.join(inputs)} ]\noutput [ {', '.join(outputs)} ]\n"
            f'instance_group [ {{ kind: KIND_CPU }} ]\n{extra}')


VEC16 = ("TYPE_FP32", "16")  # FP32 [16]
DTYPES = {  # input name -> (config type, numpy dtype)
    "a": ("TYPE_BOOL", np.bool_), "b": ("TYPE_UINT8", np.uint8), "c": ("TYPE_INT8", np.int8),
    "d": ("TYPE_INT16", np.int16), "e": ("TYPE_INT32", np.int32), "f": ("TYPE_INT64", np.int64),
    "g": ("TYPE_FP16", np.float16), "h": ("TYPE_FP32", np.float32), "i": ("TYPE_FP64", np.float64),
}
WIRE = {"TYPE_BOOL": "BOOL", "TYPE_UINT8": "UINT8", "TYPE_INT8": "INT8", "TYPE_INT16": "INT16",
        "TYPE_INT32": "INT32", "TYPE_INT64": "INT64", "TYPE_FP16": "FP16", "TYPE_FP32": "FP32",
        "TYPE_FP64": "FP64"}


@pytest.fixture(scope="module")
def torch_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Models that load."""
    repo = tmp_path_factory.mktemp("torch_repo")
    write_torch_model(repo, "add_sub", config(
        "add_sub", [io("INPUT__0", *VEC16), io("INPUT__1", *VEC16)],
        [io("OUTPUT__0", *VEC16), io("OUTPUT__1", *VEC16)],
        extra="dynamic_batching { max_queue_delay_microseconds: 300000 preferred_batch_size: [ 4 ] }",
    ), AddSub())
    # named after forward()'s arguments, listed in the other order: bound by name
    write_torch_model(repo, "add_sub_by_name", config(
        "add_sub_by_name", [io("b", *VEC16), io("a", *VEC16)],
        [io("OUTPUT__1", *VEC16), io("OUTPUT__0", *VEC16)],
    ), AddSub())
    write_torch_model(repo, "dict_product", config(
        "dict_product", [io("y", "TYPE_FP32", "3"), io("x", "TYPE_FP32", "3")],
        [io("PRODUCT", "TYPE_FP32", "3")],
    ), DictProduct())
    write_torch_model(repo, "flip_all", config(
        "flip_all", [io(n, t, "4") for n, (t, _) in DTYPES.items()],
        [io(f"OUT__{k}", t, "4") for k, (t, _) in enumerate(DTYPES.values())],
    ), FlipAll())
    write_torch_model(repo, "upper", config(
        "upper", [io("TEXT", "TYPE_STRING", "-1")], [io("UPPER", "TYPE_STRING", "-1")],
        max_batch_size=0,
    ), Upper())
    write_torch_model(repo, "fails_on_negative", config(
        "fails_on_negative", [io("INPUT__0", "TYPE_FP32", "2")], [io("OUTPUT__0", "TYPE_FP32", "2")],
    ), FailsOnNegative())
    write_torch_model(repo, "wrong_outputs", config(
        "wrong_outputs", [io("INPUT__0", "TYPE_FP32", "3")],
        [io("OUTPUT__0", "TYPE_FP32", "3"), io("OUTPUT__1", "TYPE_FP32", "3")],
    ), WrongOutputs())
    write_torch_model(repo, "traced", config(
        "traced", [io("INPUT__0", "TYPE_FP32", "4")], [io("OUTPUT__0", "TYPE_FP32", "2")],
    ), Scaled(), example=(torch.zeros(2, 4),))
    write_torch_model(repo, "running_sum", config(
        "running_sum", [io("INPUT__0", "TYPE_FP32", "1")], [io("OUTPUT__0", "TYPE_FP32", "1")],
        extra="""sequence_batching {
  control_input [ { name: "START__1" control [ { kind: CONTROL_SEQUENCE_START fp32_false_true: [ 0, 1 ] } ] } ]
  state [ { input_name: "SUM__2" output_name: "SUM__1" data_type: TYPE_FP32 dims: [ 1 ] } ]
}""",
    ), Accumulate())
    for name, params in (("grad_default", ""), ("grad_no_inference_mode", "false")):
        extra = (f'parameters {{ key: "INFERENCE_MODE" value: {{ string_value: "{params}" }} }}'
                 if params else "")
        write_torch_model(repo, name, config(
            name, [io("INPUT__0", "TYPE_FP32", "1")], [io("OUTPUT__0", "TYPE_FP32", "1")],
            extra=extra), GradProbe())
    return repo


async def infer(server: Server, model: str, inputs: dict[str, np.ndarray], **kwargs):
    tensors = [Tensor(n, _wire(a), a) for n, a in inputs.items()]
    response = await server.infer(InferenceRequest(model, tensors, **kwargs))
    return {t.name: t.data for t in response.outputs}


def _wire(array: np.ndarray) -> str:
    from workbench.common.datatypes import wire_name

    return wire_name(array)


@pytest.fixture
def serve(torch_repo: Path):
    """``async with serve(*models) as server``: an explicit-mode Server holding ``models``."""

    def make(*models: str, repo: Path | None = None) -> Server:
        options = ServerOptions(model_repository=[str(repo or torch_repo)],
                                model_control_mode="explicit", load_model=list(models),
                                exit_on_error=False)
        return Server(options)

    return make


# --- naming conventions and datatypes -------------------------------------------------------------


async def test_add_sub_with_triton_index_names(serve) -> None:
    a = np.arange(32, dtype=np.float32).reshape(2, 16)
    b = np.full((2, 16), 3, np.float32)
    async with serve("add_sub") as server:
        out = await infer(server, "add_sub", {"INPUT__0": a, "INPUT__1": b})
        np.testing.assert_array_equal(out["OUTPUT__0"], a + b)
        np.testing.assert_array_equal(out["OUTPUT__1"], a - b)
        meta = await server.model_metadata("add_sub")
        assert meta["platform"] == "pytorch_libtorch"
        assert (await server.model_config("add_sub")).backend == "pytorch"
        only = await server.infer(InferenceRequest(
            "add_sub", [Tensor("INPUT__0", "FP32", a), Tensor("INPUT__1", "FP32", b)],
            outputs=[RequestedOutput("OUTPUT__1")]))
        assert [t.name for t in only.outputs] == ["OUTPUT__1"]


async def test_inputs_bind_by_forward_argument_names(serve) -> None:
    a = np.full((1, 16), 10, np.float32)
    b = np.ones((1, 16), np.float32)
    async with serve("add_sub_by_name") as server:
        out = await infer(server, "add_sub_by_name", {"a": a, "b": b})
    np.testing.assert_array_equal(out["OUTPUT__0"], a + b)
    np.testing.assert_array_equal(out["OUTPUT__1"], a - b)  # 9, not -9: "a" went to argument a


async def test_dict_input_gets_every_input_by_name(serve) -> None:
    x = np.array([[1, 2, 3]], np.float32)
    y = np.array([[4, 5, 6]], np.float32)
    async with serve("dict_product") as server:
        out = await infer(server, "dict_product", {"x": x, "y": y})
    np.testing.assert_array_equal(out["PRODUCT"], x * y)


async def test_traced_module_with_named_index_input(serve) -> None:
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    async with serve("traced") as server:
        out = await infer(server, "traced", {"INPUT__0": x})
    assert out["OUTPUT__0"].shape == (2, 2) and out["OUTPUT__0"].dtype == np.float32


async def test_every_numeric_datatype_round_trips(serve) -> None:
    rng = np.random.default_rng(0)
    inputs: dict[str, np.ndarray] = {}
    for name, (_, dtype) in DTYPES.items():
        values = rng.integers(0, 2 if dtype is np.bool_ else 100, size=(3, 4))
        inputs[name] = values.astype(dtype)
    async with serve("flip_all") as server:
        out = await infer(server, "flip_all", inputs)
    for k, (name, (_, dtype)) in enumerate(DTYPES.items()):
        result = out[f"OUT__{k}"]
        assert result.dtype == np.dtype(dtype), name
        np.testing.assert_array_equal(result, inputs[name][:, ::-1])


async def test_bytes_through_a_list_of_strings(serve) -> None:
    text = np.array([b"hello", "gr\u00fc\u00df".encode(), b""], dtype=object)
    async with serve("upper") as server:
        out = await infer(server, "upper", {"TEXT": text})
    # TorchScript's str.upper() maps ASCII only; the UTF-8 of the rest survives the round trip
    assert out["UPPER"].tolist() == [b"HELLO", "GR\u00fc\u00df".encode(), b""]


async def test_sequence_controls_and_implicit_state_bind_by_index(serve) -> None:
    async def run(sequence_id: int, values: list[float]) -> list[float]:
        sums = []
        for i, value in enumerate(values):
            params = {"sequence_id": sequence_id, "sequence_start": i == 0,
                      "sequence_end": i == len(values) - 1}
            request = InferenceRequest("running_sum", [Tensor("INPUT__0", "FP32", np.full((1, 1), value, np.float32))],
                                       parameters=params)
            response = await server.infer(request)
            assert [t.name for t in response.outputs] == ["OUTPUT__0"]  # the state stays inside
            sums.append(float(response.outputs[0].data[0, 0]))
        return sums

    async with serve("running_sum") as server:
        results = await asyncio.gather(run(7, [1, 2, 3, 4]), run(8, [10, 20]))
    assert list(results) == [[1, 3, 6, 10], [10, 30]]  # (typeshed types gather's list as a tuple)


# --- execution errors -----------------------------------------------------------------------------


async def test_model_error_fails_that_request_and_the_model_keeps_serving(serve) -> None:
    async with serve("fails_on_negative") as server:
        with pytest.raises(WorkbenchError, match="PyTorch execute failure") as info:
            await infer(server, "fails_on_negative", {"INPUT__0": np.full((1, 2), -1, np.float32)})
        assert "negative input" in info.value.message
        out = await infer(server, "fails_on_negative", {"INPUT__0": np.ones((1, 2), np.float32)})
        np.testing.assert_array_equal(out["OUTPUT__0"], np.full((1, 2), 2, np.float32))
        stats = (await server.statistics("fails_on_negative"))["model_stats"][0]
        assert stats["inference_stats"]["fail"]["count"] == 1
        assert stats["inference_stats"]["success"]["count"] == 1


async def test_outputs_that_disagree_with_the_config_fail_clearly(serve) -> None:
    x = np.ones((2, 3), np.float32)
    async with serve("wrong_outputs") as server:
        with pytest.raises(WorkbenchError) as info:
            await server.infer(InferenceRequest(
                "wrong_outputs", [Tensor("INPUT__0", "FP32", x)], outputs=[RequestedOutput("OUTPUT__0")]))
        assert info.value.message == (
            "output 'OUTPUT__0' of model 'wrong_outputs' has shape [2,4], but the model "
            "configuration expects [2,3] (batch dimension 2, then the configured dims [3])"
        )
        with pytest.raises(WorkbenchError) as info:
            await server.infer(InferenceRequest(
                "wrong_outputs", [Tensor("INPUT__0", "FP32", x)], outputs=[RequestedOutput("OUTPUT__1")]))
        assert info.value.message == (
            "configuration expects datatype TYPE_FP32 for output 'OUTPUT__1', model provides TYPE_FP64"
        )


# --- batching -------------------------------------------------------------------------------------


async def test_dynamic_batching_runs_queued_requests_in_one_execution(serve) -> None:
    async with serve("add_sub") as server:
        rows = [np.full((1, 16), i, np.float32) for i in range(4)]
        results = await asyncio.gather(*(
            infer(server, "add_sub", {"INPUT__0": r, "INPUT__1": r}) for r in rows))
        for row, out in zip(rows, results, strict=True):
            np.testing.assert_array_equal(out["OUTPUT__0"], row * 2)
            np.testing.assert_array_equal(out["OUTPUT__1"], np.zeros_like(row))
        stats = (await server.statistics("add_sub"))["model_stats"][0]
    assert stats["inference_count"] == 4 and stats["execution_count"] == 1
    assert [b["batch_size"] for b in stats["batch_stats"]] == [4]


# --- parameters -----------------------------------------------------------------------------------


async def test_inference_mode_by_default_and_no_grad_when_disabled(serve) -> None:
    one = {"INPUT__0": np.ones((1, 1), np.float32)}
    async with serve("grad_default", "grad_no_inference_mode") as server:
        assert (await infer(server, "grad_default", one))["OUTPUT__0"].item() == 10.0
        assert (await infer(server, "grad_no_inference_mode", one))["OUTPUT__0"].item() == 0.0


def test_disable_optimized_execution_holds_for_the_instance_thread_only(torch_repo: Path) -> None:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

    from workbench.backends.base import BackendRequest, ExecutionTimes, InstanceSpec
    from workbench.config.model_config import read_model_config

    cfg = ModelConfig()
    cfg.CopyFrom(read_model_config(torch_repo / "traced"))
    cfg.parameters["DISABLE_OPTIMIZED_EXECUTION"].string_value = "true"
    instance = pytorch_backend.PyTorchBackend().load_instance(
        cfg, torch_repo / "traced" / "1", InstanceSpec("traced_0", "traced", "KIND_CPU"))
    seen = {}

    def run() -> None:
        request = BackendRequest({"INPUT__0": np.ones((1, 4), np.float32)}, ["OUTPUT__0"])
        instance.execute([request], ExecutionTimes())
        seen["instance thread"] = torch._C._get_graph_executor_optimize()

    worker = threading.Thread(target=run)
    worker.start()
    worker.join()
    assert seen == {"instance thread": False}
    assert torch._C._get_graph_executor_optimize() is True


def test_parameters_parse_like_triton() -> None:
    from workbench.config.model_config import parse_model_config

    text = config("m", [io("INPUT__0", *VEC16)], [io("OUTPUT__0", *VEC16)], extra="""
parameters { key: "DISABLE_OPTIMIZED_EXECUTION" value: { string_value: "On" } }
parameters { key: "INFERENCE_MODE" value: { string_value: "0" } }
parameters { key: "ENABLE_JIT_PROFILING" value: { string_value: "false" } }
parameters { key: "NUM_THREADS" value: { string_value: "3" } }
parameters { key: "INTER_OP_THREAD_COUNT" value: { string_value: "2" } }
parameters { key: "ENABLE_NVFUSER" value: { string_value: "true" } }
""")
    options = pytorch_options.parse_parameters(parse_model_config(text))
    assert options == pytorch_options.TorchOptions(
        optimized_execution=False, inference_mode=False, jit_profiling=False,
        intra_op_threads=3, inter_op_threads=2)
    bad = parse_model_config(text.replace('"On"', '"maybe"'))
    with pytest.raises(WorkbenchError, match="parameter 'DISABLE_OPTIMIZED_EXECUTION' must be a boolean"):
        pytorch_options.parse_parameters(bad)


def test_thread_counts_are_process_wide_first_model_wins(monkeypatch, caplog) -> None:
    monkeypatch.setattr(pytorch_options, "_THREAD_COUNTS", {})
    before = torch.get_num_threads()
    wanted = 1 if before != 1 else 2
    try:
        with caplog.at_level(logging.INFO, logger="workbench.backends.pytorch_options"):
            pytorch_options.apply_thread_counts(torch, pytorch_options.TorchOptions(intra_op_threads=wanted), "m1")
            assert torch.get_num_threads() == wanted
            pytorch_options.apply_thread_counts(torch, pytorch_options.TorchOptions(intra_op_threads=before), "m2")
            assert torch.get_num_threads() == wanted
    finally:
        torch.set_num_threads(before)
    assert f"Intra-op thread count is set to {wanted} for model 'm1'" in caplog.text
    assert "model 'm1' already set it" in caplog.text


async def test_weight_sharing_and_ignored_parameters(tmp_path: Path, serve, caplog) -> None:
    extra = """instance_group [ { kind: KIND_CPU count: 2 } ]
parameters { key: "ENABLE_WEIGHT_SHARING" value: { string_value: "true" } }
parameters { key: "ENABLE_NVFUSER" value: { string_value: "true" } }
parameters { key: "ENABLE_CACHE_CLEANING" value: { string_value: "true" } }"""
    text = config("shared", [io("INPUT__0", *VEC16), io("INPUT__1", *VEC16)],
                  [io("OUTPUT__0", *VEC16)]).replace("instance_group [ { kind: KIND_CPU } ]", extra)
    write_torch_model(tmp_path, "shared", text, AddSub())
    with caplog.at_level(logging.INFO, logger="workbench.backends"):
        async with serve("shared", repo=tmp_path) as server:
            a = np.ones((1, 16), np.float32)
            out = await infer(server, "shared", {"INPUT__0": a, "INPUT__1": a})
            np.testing.assert_array_equal(out["OUTPUT__0"], a * 2)
    # the two instances load side by side: whichever reads the file second reuses the first's module
    reused = re.findall(r"Reusing TorchScript model for instance '(shared_0_[01])'", caplog.text)
    assert len(reused) == 1, caplog.text
    assert "parameter ENABLE_NVFUSER is ignored" in caplog.text
    assert "ENABLE_CACHE_CLEANING has no effect off the GPU" in caplog.text


# --- load-time checks -----------------------------------------------------------------------------

BROKEN = {  # model name -> (config, module, expected text in the UNAVAILABLE reason)
    "too_many_inputs": (
        config("too_many_inputs", [io(f"INPUT__{i}", *VEC16) for i in range(3)], [io("OUTPUT__0", *VEC16)]),
        AddSub(), "unable to load model 'too_many_inputs', configuration expects 3 inputs, model provides 2",
    ),
    "index_out_of_range": (
        config("index_out_of_range", [io("INPUT__0", *VEC16), io("INPUT__5", *VEC16)], [io("OUTPUT__0", *VEC16)]),
        AddSub(), "input 'INPUT__5' refers to forward() argument 5 (<name>__<index> naming convention), "
                  "but forward() takes 2 (a, b)",
    ),
    "name_binds_elsewhere": (
        config("name_binds_elsewhere", [io("b", *VEC16), io("other", *VEC16)], [io("OUTPUT__0", *VEC16)]),
        AddSub(), "input 'b' is named after forward() argument 1, but not every input is named after",
    ),
    "bytes_to_tensor": (
        config("bytes_to_tensor", [io("a", "TYPE_STRING", "1"), io("b", *VEC16)], [io("OUTPUT__0", *VEC16)]),
        AddSub(), "input 'a' is TYPE_STRING but binds to forward() argument 'a' of type Tensor; "
                  "TorchScript tensors cannot hold strings",
    ),
    "uint32_input": (
        config("uint32_input", [io("INPUT__0", "TYPE_UINT32", "16"), io("INPUT__1", *VEC16)],
               [io("OUTPUT__0", *VEC16)]),
        AddSub(), "unsupported datatype TYPE_UINT32 for input 'INPUT__0' for model 'uint32_input'",
    ),
    "output_index_out_of_range": (
        config("output_index_out_of_range", [io("INPUT__0", *VEC16), io("INPUT__1", *VEC16)],
               [io("OUTPUT__2", *VEC16)]),
        AddSub(), "The output OUTPUT__2 in the model configuration refers to an output index which "
                  "doesn't exist. This model has 2 outputs",
    ),
    "dict_output": (
        config("dict_output", [io("INPUT__0", *VEC16)], [io("OUTPUT__0", *VEC16)]),
        ReturnsDict(), "forward() returns Dict[str, Tensor]; output must be of type Tensor, List[str] "
                       "or Tuple containing one of these two types",
    ),
    "no_config": ("", AddSub(), "model configuration must contain at least one input, none were "
                                "specified (TorchScript files carry no input/output metadata"),
    "not_torchscript": (
        config("not_torchscript", [io("INPUT__0", *VEC16)], [io("OUTPUT__0", *VEC16)]),
        None, "failed to load model 'not_torchscript': ",
    ),
    "missing_file": (
        config("missing_file", [io("INPUT__0", *VEC16)], [io("OUTPUT__0", *VEC16)]),
        None, "unable to find '",
    ),
    "state_not_indexed": (
        config("state_not_indexed", [io("INPUT__0", "TYPE_FP32", "1")], [io("OUTPUT__0", "TYPE_FP32", "1")],
               extra="""sequence_batching {
  control_input [ { name: "START__1" control [ { kind: CONTROL_SEQUENCE_START fp32_false_true: [ 0, 1 ] } ] } ]
  state [ { input_name: "SUM_IN" output_name: "SUM__1" data_type: TYPE_FP32 dims: [ 1 ] } ]
}"""),
        Accumulate(), "sequence state input 'SUM_IN' does not follow <name>__<index> naming convention.",
    ),
    "aoti": (
        config("aoti", [io("INPUT__0", *VEC16)], [io("OUTPUT__0", *VEC16)]).replace(
            'platform: "pytorch_libtorch"', 'backend: "pytorch" platform: "torch_aoti"'),
        AddSub(), "platform 'torch_aoti' (AOT Inductor model.pt2 archives) is not supported",
    ),
}


async def test_config_mismatches_leave_the_model_unavailable_with_the_reason(tmp_path: Path, caplog) -> None:
    for name, (text, module, _) in BROKEN.items():
        model_dir = write_torch_model(tmp_path, name, text, module)
        if name == "not_torchscript":
            (model_dir / "1" / "model.pt").write_bytes(b"not a zip archive")
        if name == "aoti":
            (model_dir / "1" / "model.pt").rename(model_dir / "1" / "model.pt2")
    options = ServerOptions(model_repository=[str(tmp_path)], exit_on_error=False)
    async with Server(options) as server:
        rows = {row["name"]: row for row in await server.repository_index()}
    for name, (_, _, expected) in BROKEN.items():
        assert rows[name]["state"] == "UNAVAILABLE", name
        assert expected in rows[name]["reason"], (name, rows[name]["reason"])
    assert "skipping model configuration auto-complete for 'no_config'" in caplog.text


# --- devices --------------------------------------------------------------------------------------


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
async def test_kind_gpu_without_cuda_fails_to_load_clearly(tmp_path: Path, serve) -> None:
    text = config("on_gpu", [io("INPUT__0", *VEC16), io("INPUT__1", *VEC16)], [io("OUTPUT__0", *VEC16)])
    write_torch_model(tmp_path, "on_gpu", text.replace("KIND_CPU", "KIND_GPU"), AddSub())
    async with serve(repo=tmp_path) as server:
        with pytest.raises(WorkbenchError):
            await server.load_model("on_gpu")
        row = (await server.repository_index())[0]
    assert row["state"] == "UNAVAILABLE"
    assert "instance group 'on_gpu_0' is KIND_GPU but no GPU is usable here" in row["reason"]
    assert "use KIND_CPU or install a CUDA build of torch" in row["reason"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
async def test_kind_gpu_runs_on_cuda(tmp_path: Path, serve) -> None:
    text = config("on_gpu", [io("INPUT__0", *VEC16), io("INPUT__1", *VEC16)],
                  [io("OUTPUT__0", *VEC16), io("OUTPUT__1", *VEC16)],
                  extra="dynamic_batching { max_queue_delay_microseconds: 200000 }")
    write_torch_model(tmp_path, "on_gpu", text.replace("KIND_CPU", "KIND_GPU"), AddSub())
    async with serve("on_gpu", repo=tmp_path) as server:
        rows = [np.full((2, 16), i, np.float32) for i in range(3)]
        results = await asyncio.gather(*(
            infer(server, "on_gpu", {"INPUT__0": r, "INPUT__1": r + 1}) for r in rows))
        config_kind = (await server.model_config("on_gpu")).instance_group[0].kind
    for row, out in zip(rows, results, strict=True):
        np.testing.assert_array_equal(out["OUTPUT__0"], 2 * row + 1)
        np.testing.assert_array_equal(out["OUTPUT__1"], np.full_like(row, -1))
    assert config_kind == 1  # KIND_GPU


# --- torch stays optional ---------------------------------------------------------------------------


def test_server_runs_without_torch(tmp_path: Path) -> None:
    """No torch import for other backends; a pytorch model without torch fails to load clearly."""
    from workbench.testing.models import ADD_SUB_CONFIG, add_sub_graph, write_model

    write_model(tmp_path, "add_sub", ADD_SUB_CONFIG, add_sub_graph())
    write_torch_model(tmp_path, "torch_model", config(
        "torch_model", [io("INPUT__0", *VEC16), io("INPUT__1", *VEC16)], [io("OUTPUT__0", *VEC16)]),
        AddSub())
    script = f"""
import asyncio, sys
sys.modules["torch"] = None  # import torch -> ImportError
from workbench import Server, ServerOptions
async def main():
    options = ServerOptions(model_repository=[{str(tmp_path)!r}], exit_on_error=False)
    async with Server(options) as server:
        rows = {{r["name"]: r for r in await server.repository_index()}}
    assert rows["add_sub"]["state"] == "READY", rows
    assert rows["torch_model"]["state"] == "UNAVAILABLE", rows
    print(rows["torch_model"]["reason"])
asyncio.run(main())
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "the pytorch backend needs the 'torch' package" in done.stdout
    assert "pip install workbench[pytorch]" in done.stdout
    check = subprocess.run(
        [sys.executable, "-c", "import sys, workbench.engine.api.server, workbench.backends.registry, "
         "workbench.frontends.http; assert 'torch' not in sys.modules"],
        capture_output=True, text=True, timeout=120)
    assert check.returncode == 0, check.stderr


# --- the sample model through HTTP, in process ------------------------------------------------------


async def test_digits_torchscript_sample_over_http(sample_repository: Path, asgi_client) -> None:
    """digits_torchscript holds digits_mlp v1's weights: same logits, accuracy >= 0.9."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    _, x_test, _, y_test = train_test_split(x, y, test_size=0.25, random_state=0)
    x_test = x_test.astype(np.float32)
    options = ServerOptions(model_repository=[str(sample_repository)], model_control_mode="explicit",
                            load_model=["digits_torchscript", "digits_mlp"])
    async with Server(options) as server, asgi_client(server) as http:
        meta = (await http.get("/v2/models/digits_torchscript")).json()
        assert meta["platform"] == "pytorch_libtorch"
        assert meta["inputs"] == [{"name": "INPUT__0", "datatype": "FP32", "shape": [-1, 64]}]
        assert meta["outputs"] == [{"name": "OUTPUT__0", "datatype": "FP32", "shape": [-1, 10]}]
        logit_chunks: list[np.ndarray] = []
        reference_chunks: list[np.ndarray] = []
        for start in range(0, len(x_test), 64):
            chunk = x_test[start : start + 64]
            for model, name, out, sink in (("digits_torchscript", "INPUT__0", "OUTPUT__0", logit_chunks),
                                           ("digits_mlp", "pixels", "logits", reference_chunks)):
                body = {"inputs": [{"name": name, "shape": list(chunk.shape), "datatype": "FP32",
                                    "data": chunk.ravel().tolist()}]}
                path = f"/v2/models/{model}" + ("/versions/1" if model == "digits_mlp" else "") + "/infer"
                reply = await http.post(path, json=body)
                assert reply.status_code == 200, reply.text
                (output,) = reply.json()["outputs"]
                assert output["name"] == out and output["shape"] == [len(chunk), 10]
                sink.append(np.array(output["data"], np.float32).reshape(len(chunk), 10))
    logits, reference = np.concatenate(logit_chunks), np.concatenate(reference_chunks)
    assert float((logits.argmax(axis=1) == y_test).mean()) >= 0.9
    np.testing.assert_allclose(logits, reference, atol=1e-4)


# --- ragged batching (issue 19 item 4) -----------------------------------------------------------


class RaggedDouble(torch.nn.Module):
    """The flat ragged batch and its batch input: OUTPUT__0 = 2 * INPUT__0 [n] (scattered back
    per request), END__1 = INDEX__1 as [b, 1], TOTAL__2 = [[n]] * b (the flat length)."""

    def forward(self, values: torch.Tensor, index: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        total = torch.full((index.shape[0], 1), values.shape[0], dtype=torch.int64)
        return values * 2, index.unsqueeze(1), total


def ragged_config(name: str, target: str = "INDEX__1") -> str:
    return config(
        name, ['{ name: "INPUT__0" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true }'],
        [io("OUTPUT__0", "TYPE_FP32", "-1"), io("END__1", "TYPE_INT32", "1"),
         io("TOTAL__2", "TYPE_INT64", "1")],
        extra=f"""batch_input [ {{ kind: BATCH_ACCUMULATED_ELEMENT_COUNT target_name: "{target}"
  data_type: TYPE_INT32 source_input: "INPUT__0" }} ]
batch_output [ {{ kind: BATCH_SCATTER_WITH_INPUT_SHAPE target_name: "OUTPUT__0" source_input: "INPUT__0" }} ]
dynamic_batching {{ preferred_batch_size: [ 3 ] max_queue_delay_microseconds: 20000000 }}""")


async def test_ragged_inputs_batch_input_and_scatter_output(tmp_path: Path, serve) -> None:
    """Requests of lengths 3, 4, 5 run as one forward() on the flat [12] input with the batch
    input as one more argument, and OUTPUT__0 goes back in each request's own shape."""
    write_torch_model(tmp_path, "ragged", ragged_config("ragged"), RaggedDouble())
    async with serve("ragged", repo=tmp_path) as server:
        rows = [np.arange(start, start + n, dtype=np.float32).reshape(1, n)
                for n, start in ((3, 0.0), (4, 10.0), (5, 20.0))]
        results = await asyncio.gather(*(infer(server, "ragged", {"INPUT__0": r}) for r in rows))
        stats = (await server.statistics("ragged"))["model_stats"][0]
    assert stats["execution_count"] == 1 and stats["inference_count"] == 3
    for row, end, out in zip(rows, (3, 7, 12), results, strict=True):
        assert out["OUTPUT__0"].shape == row.shape
        np.testing.assert_array_equal(out["OUTPUT__0"], row * 2)
        assert out["END__1"].tolist() == [[end]] and out["TOTAL__2"].tolist() == [[12]]


@pytest.mark.parametrize(("target", "reason"), [
    ("INDEX", "batch input 'INDEX' does not follow <name>__<index> naming convention, as the "
              "model's inputs do."),
    ("INDEX__0", "inputs 'INPUT__0' and 'INDEX__0' both refer to forward() argument 0"),
])
async def test_a_batch_input_that_cannot_bind_fails_the_load(tmp_path: Path, target: str,
                                                             reason: str) -> None:
    write_torch_model(tmp_path, "ragged", ragged_config("ragged", target), RaggedDouble())
    async with Server(ServerOptions(model_repository=[str(tmp_path)], exit_on_error=False)) as server:
        (row,) = await server.repository_index()
    assert row["state"] == "UNAVAILABLE" and reason in row["reason"], row


async def test_an_output_reshape_is_undone_for_the_client(tmp_path: Path, serve) -> None:
    """dims [4] reshape [2,2]: the module sees and makes [batch,2,2]; the client gets [batch,4]
    (Triton's core undoes an output's reshape for every backend)."""
    from workbench.testing.models import reshape_config

    write_torch_model(tmp_path, "reshaped", reshape_config(
        "reshaped", "pytorch_libtorch", 8, "4", "2, 2", ("INPUT__0", "OUTPUT__0")), FailsOnNegative())
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    async with serve("reshaped", repo=tmp_path) as server:
        out = await infer(server, "reshaped", {"INPUT__0": x})
    assert out["OUTPUT__0"].shape == (2, 4)
    np.testing.assert_array_equal(out["OUTPUT__0"], x * 2)
