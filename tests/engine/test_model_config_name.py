"""``--model-config-name`` and ``--model-load-retry-count`` (issue 33, L8), as tritonserver:
a model reads ``configs/<name>.pbtxt`` when it exists, else ``config.pbtxt`` or auto-complete
(Triton's model_configuration.md examples); a version whose load fails is loaded again up to
the retry count."""

from __future__ import annotations

from pathlib import Path

import pytest

from workbench import Server, ServerOptions
from workbench.hosts.cli import build_parser, options_from_args
from workbench.testing.fake_backend import BEHAVIOUR, FAKE_CONFIG, fake_request, write_fake_model
from workbench.testing.models import ADD_SUB_CONFIG, add_sub_graph, write_model

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("fake_backend")]


def _configs(folder: Path, **texts: str) -> None:
    (folder / "configs").mkdir()
    for name, text in texts.items():
        (folder / "configs" / f"{name}.pbtxt").write_text(text)


async def test_custom_config_wins_where_it_exists(tmp_path: Path) -> None:
    a = write_fake_model(tmp_path, "model_a", count=1)
    _configs(a, h100=FAKE_CONFIG.format(name="model_a", count=3, group=""),
             v100=FAKE_CONFIG.format(name="model_a", count=2, group=""))
    _configs(write_fake_model(tmp_path, "model_b", count=1), v100="this is not a config")
    c = write_model(tmp_path, "model_c", None, add_sub_graph())  # no config.pbtxt: auto-complete
    _configs(c, h100=ADD_SUB_CONFIG.replace('"add_sub"', '"model_c"').replace("max_batch_size: 8", "max_batch_size: 2"))
    d = write_model(tmp_path, "model_d", None, add_sub_graph())
    _configs(d, v100="this is not a config")
    async with Server(ServerOptions(model_repository=[str(tmp_path)], model_config_name="h100")) as server:
        assert (await server.model_config("model_a")).instance_group[0].count == 3
        assert (await server.model_config("model_b")).instance_group[0].count == 1
        assert (await server.model_config("model_c")).max_batch_size == 2
        assert (await server.model_config("model_d")).max_batch_size == 4  # auto-completed
        files = server.config_files
        assert (await files.model_config_file("model_a"))["path"] == str(a / "configs" / "h100.pbtxt")
        assert (await files.model_config_file("model_b"))["path"] == str(tmp_path / "model_b" / "config.pbtxt")
    async with Server(ServerOptions(model_repository=[str(tmp_path)], model_control_mode="explicit",
                                    load_model=["model_a"])) as server:
        assert (await server.model_config("model_a")).instance_group[0].count == 1  # no flag: config.pbtxt


async def test_flags() -> None:
    args = build_parser().parse_args(["serve", "--model-repository=/m", "--model-config-name=h100",
                                      "--model-load-retry-count=2"])
    options = options_from_args(args)
    assert (options.model_config_name, options.model_load_retry_count) == ("h100", 2)
    with pytest.raises(SystemExit):  # Triton: "Error: empty argument for --model-config-name"
        build_parser().parse_args(["serve", "--model-repository=/m", "--model-config-name="])
    for bad in ("h 100", "../x", "a/b"):
        with pytest.raises(ValueError, match="invalid --model-config-name"):
            ServerOptions(model_config_name=bad)


@pytest.mark.parametrize(("retries", "ready"), [(0, False), (2, True)])
async def test_a_failed_load_is_retried(tmp_path: Path, retries: int, ready: bool) -> None:
    write_fake_model(tmp_path, "flaky", count=1)
    BEHAVIOUR.fail_loads = 2  # the first two loads fail, the third works
    options = ServerOptions(model_repository=[str(tmp_path)], model_load_retry_count=retries,
                            exit_on_error=False)
    async with Server(options) as server:
        row = next(r for r in await server.repository_index() if r["name"] == "flaky")
        assert (row["state"] == "READY") is ready, row
        assert BEHAVIOUR.loads == retries + 1
        if ready:
            assert (await server.infer(fake_request("flaky", 3.0))).outputs[0].data.tolist() == [[3.0]]
        else:
            assert row["reason"].endswith("fake load failure 1")
