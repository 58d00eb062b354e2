"""A backend is one class and one row: a toy backend added to the backend table
(``workbench.config.backend_specs``) is detected from its model file, auto-completed,
normalized, validated and served by a real :class:`Server`, with nothing else edited; without
its row the same model folder is refused."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest
from tritonclient.grpc import model_config_pb2 as mc

from workbench import (
    InferenceRequest,
    InvalidModelConfig,
    Server,
    ServerOptions,
    Tensor,
)
from workbench.backends.base import (
    Backend,
    BackendRequest,
    BackendResponse,
    ExecutionTimes,
    InstanceSpec,
    ModelInstance,
)
from workbench.backends.batching import gather_inputs, split_outputs
from workbench.backends.registry import backend_for, servable_backends
from workbench.config import autocomplete_model_config, validate_model_config
from workbench.config.backend_specs import (
    AutocompleteOptions,
    BackendSpec,
    ModelFile,
    add_backend_spec,
    remove_backend_spec,
)


class ToyInstance(ModelInstance):
    """OUTPUT0 = INPUT0 * the factor written in the model file."""

    def __init__(self, spec: InstanceSpec, factor: float) -> None:
        super().__init__(spec)
        self.factor = factor

    def execute(self, requests: Sequence[BackendRequest], times: ExecutionTimes) -> list[BackendResponse]:
        feed, sizes = gather_inputs(requests)
        times.mark_input_done()
        outputs = {"OUTPUT0": feed["INPUT0"] * np.float32(self.factor)}
        times.mark_infer_done()
        return split_outputs(requests, outputs, sizes)


class ToyBackend(Backend):
    """The whole backend: reads the factor from ``<version>/model.toy``."""

    def load_instance(self, config: mc.ModelConfig, version_dir: Path, spec: InstanceSpec) -> ModelInstance:
        return ToyInstance(spec, float((version_dir / config.default_model_filename).read_text()))


def toy_autocomplete(config: mc.ModelConfig, model_dir: Path, options: AutocompleteOptions) -> None:
    """What the toy's model file implies: INPUT0 -> OUTPUT0, FP32 [2], batching."""
    if not config.input:
        config.input.add(name="INPUT0", data_type=mc.TYPE_FP32, dims=[2])
    if not config.output:
        config.output.add(name="OUTPUT0", data_type=mc.TYPE_FP32, dims=[2])
    if config.max_batch_size == 0:
        config.max_batch_size = options.default_max_batch_size


#: the one row
TOY = BackendSpec("wbtoy", (ModelFile("model.toy", "wbtoy_plan"),), f"{__name__}:ToyBackend",
                  toy_autocomplete, gpu_capable=False, cpu_instance_count=3)


@pytest.fixture
def toy_row() -> Iterator[BackendSpec]:
    add_backend_spec(TOY)
    yield TOY
    remove_backend_spec(TOY.name)


def toy_repository(root: Path) -> Path:
    """``root/toy/1/model.toy`` (factor 3) and no config.pbtxt."""
    (root / "toy" / "1").mkdir(parents=True)
    (root / "toy" / "1" / "model.toy").write_text("3")
    return root


async def test_a_backend_added_by_one_row_is_completed_validated_and_served(
    tmp_path: Path, toy_row: BackendSpec
) -> None:
    async with Server(ServerOptions(model_repository=[str(toy_repository(tmp_path))])) as server:
        assert await server.model_ready("toy")
        config = await server.model_config("toy")
        data = np.arange(4, dtype=np.float32).reshape(2, 2)
        response = await server.infer(InferenceRequest("toy", [Tensor("INPUT0", "FP32", data)]))
    # auto-complete: backend fields from the file, the rest from the row's hook
    assert (config.backend, config.platform, config.default_model_filename) == (
        "wbtoy", "wbtoy_plan", "model.toy")
    assert config.max_batch_size == ServerOptions().default_max_batch_size
    # normalization: not GPU-capable, so KIND_AUTO is KIND_CPU, with the row's count
    group = config.instance_group[0]
    assert (group.kind, group.count) == (mc.ModelInstanceGroup.KIND_CPU, 3)
    np.testing.assert_array_equal(response.outputs[0].data, data * 3)


def test_validation_and_the_registry_read_the_row(toy_row: BackendSpec) -> None:
    config = mc.ModelConfig(name="m", backend="wbtoy", platform="wbtoy_plan")
    validate_model_config(config, "m")  # default known backends include the row's
    with pytest.raises(InvalidModelConfig, match="unexpected 'platform' and 'backend' pair, "
                                                 "got:other, wbtoy"):
        validate_model_config(mc.ModelConfig(name="m", backend="wbtoy", platform="other"), "m")
    assert {"wbtoy", "wbtoy_plan"} <= servable_backends()
    backend = backend_for(mc.ModelConfig(name="m", platform="wbtoy_plan"))
    assert isinstance(backend, ToyBackend) and backend.default_model_filename == "model.toy"
    with pytest.raises(ValueError, match="already"):
        add_backend_spec(TOY)


def test_without_its_row_the_toy_model_is_refused(tmp_path: Path) -> None:
    repo = toy_repository(tmp_path)
    with pytest.raises(InvalidModelConfig, match="Could not determine backend for model 'toy'"):
        autocomplete_model_config(None, "toy", repo / "toy")
    with pytest.raises(InvalidModelConfig, match="unable to find backend library for backend 'wbtoy'"):
        validate_model_config(mc.ModelConfig(name="m", backend="wbtoy"), "m")
    assert "wbtoy" not in servable_backends()
