"""``default_model_filename`` stays inside the version folder: a config (a config.pbtxt, or one
sent with a load request) cannot make a backend read a file elsewhere, and auto-complete never
reads such a file either. Real config code, real engine and ONNX models."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workbench import InvalidArgument, Server, ServerOptions
from workbench.common.errors import InvalidModelConfig
from workbench.config import autocomplete_model_config, parse_model_config
from workbench.testing.models import add_sub_graph, write_model

OUTSIDE = ["../../other/1/model.onnx", "/etc/passwd", "sub/../../model.onnx", "..", "./model.onnx",
           "a\0b"]


@pytest.mark.parametrize("name", OUTSIDE)
def test_autocomplete_refuses_a_model_file_outside_the_version_folder(tmp_path: Path, name: str) -> None:
    write_model(tmp_path, "other", None, add_sub_graph())  # a readable graph outside "m"
    (tmp_path / "m" / "1").mkdir(parents=True)
    config = parse_model_config(f'backend: "onnxruntime" default_model_filename: {json.dumps(name)}')
    with pytest.raises(InvalidModelConfig, match=r"default_model_filename .* of model 'm' must name a "
                       r"file inside the version folder"):
        autocomplete_model_config(config, "m", tmp_path / "m")


def test_a_file_in_a_subfolder_of_the_version_is_fine(tmp_path: Path) -> None:
    folder = write_model(tmp_path, "m", None, add_sub_graph())
    (folder / "1" / "sub").mkdir()
    (folder / "1" / "model.onnx").rename(folder / "1" / "sub" / "net.onnx")
    config = parse_model_config('backend: "onnxruntime" default_model_filename: "sub/net.onnx"')
    assert autocomplete_model_config(config, "m", folder).input  # read from the graph


async def test_load_request_config_cannot_point_outside(tmp_path: Path) -> None:
    write_model(tmp_path, "other", None, add_sub_graph())
    (tmp_path / "m" / "1").mkdir(parents=True)
    options = ServerOptions(model_repository=[str(tmp_path)], model_control_mode="explicit")
    async with Server(options) as server:
        override = {"backend": "onnxruntime", "default_model_filename": "../../other/1/model.onnx"}
        with pytest.raises(InvalidArgument, match=r"load failed for model 'm': default_model_filename .* "
                                                  r"must name a file inside the version folder"):
            await server.load_model("m", config=json.dumps(override))
        assert not await server.model_ready("m")
        await server.load_model("other")  # the repository keeps serving
        assert await server.model_ready("other")
