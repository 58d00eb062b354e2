"""Editing a model's config.pbtxt through the engine: read, validate with line numbers, atomic
write with backup, hot reload, revert (``Server.config_files``: ``model_config_file`` and
friends), on the real Server and the real add_sub ONNX model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from workbench import (
    ConfigConflict,
    ConfigProblem,
    InferenceRequest,
    InvalidArgument,
    InvalidModelConfig,
    ModelNotFound,
    Server,
    ServerOptions,
    Tensor,
)
from workbench.config.problems import locate_message, parse_config_text
from workbench.engine.manager.config_files import config_version
from workbench.testing.ensembles import build_ensemble_repository
from workbench.testing.reload import add_sub_config, write_add_sub


def add_sub_request(name: str = "add_sub") -> InferenceRequest:
    a = np.ones((1, 16), np.float32)
    return InferenceRequest(name, [Tensor("INPUT0", "FP32", a), Tensor("INPUT1", "FP32", a)])


@pytest.fixture
async def explicit(tmp_path: Path):
    write_add_sub(tmp_path)
    async with Server(ServerOptions(model_repository=[str(tmp_path)], model_control_mode="explicit",
                                    load_model=["add_sub"])) as server:
        yield server, tmp_path / "add_sub"


# ------------------------------------------------------------------ problems with lines
def test_syntax_error_has_protobufs_line_and_column() -> None:
    config, problems = parse_config_text('name: "m"\nmax_batch_size: 8\ninput [ { name: "x" data_type: TYPE_NOPE } ]\n')
    assert config is None
    assert problems == [ConfigProblem(problems[0].message, "syntax", 3, problems[0].column)]
    column = problems[0].column
    assert "TYPE_NOPE" in problems[0].message and column is not None and column > 20


def test_semantic_message_is_placed_on_the_line_it_names() -> None:
    text = 'name: "m"\nmax_batch_size: 8\ninput [\n  { name: "INPUT0" dims: [ 16 ] }\n]\n'
    assert locate_message(text, "model input 'INPUT0' must specify 'data_type'") == 4
    assert locate_message(text, "max_batch_size must be >= 0") == 2
    assert locate_message(text, "something about nothing here") is None


async def test_validate_reports_nothing_for_the_file_on_disk(explicit) -> None:
    server, folder = explicit
    current = await server.config_files.model_config_file("add_sub")
    assert current["exists"] and current["writable"] and not current["backup_exists"]
    assert current["text"] == (folder / "config.pbtxt").read_text()
    assert await server.config_files.validate_model_config_text("add_sub", current["text"]) == []


async def test_validate_runs_the_loaders_checks_with_line_numbers(explicit) -> None:
    server, _ = explicit
    text = add_sub_config("add_sub", 8, 1).replace("dims: [ 16 ] },\n  { name: \"INPUT1\"",
                                                    "dims: [ 16, -2 ] },\n  { name: \"INPUT1\"")
    problems = await server.config_files.validate_model_config_text("add_sub", text)
    assert len(problems) == 1 and problems[0].kind == "semantic"
    assert "INPUT0" in problems[0].message
    assert text.splitlines()[problems[0].line - 1].strip().startswith('{ name: "INPUT0"')
    wrong_name = add_sub_config("other", 8, 1)
    [problem] = await server.config_files.validate_model_config_text("add_sub", wrong_name)
    assert "other" in problem.message and problem.line == 2


async def test_validate_unknown_model_and_oversized_text(explicit) -> None:
    server, _ = explicit
    with pytest.raises(ModelNotFound, match="'nope' is not in the model repository"):
        await server.config_files.validate_model_config_text("nope", "")
    with pytest.raises(ModelNotFound):
        await server.config_files.model_config_file("../add_sub")
    with pytest.raises(InvalidArgument, match="larger than"):
        await server.config_files.validate_model_config_text("add_sub", "#" * (1 << 20 + 1))


# ------------------------------------------------------------------ write, reload, revert
async def test_write_is_validated_backed_up_and_hot_reloaded(explicit) -> None:
    server, folder = explicit
    before = (folder / "config.pbtxt").read_text()
    bad = before.replace("max_batch_size: 8", "max_batch_size: -3")
    with pytest.raises(InvalidModelConfig, match=r"line 4: .*max_batch_size"):
        await server.config_files.write_model_config("add_sub", bad)
    assert (folder / "config.pbtxt").read_text() == before  # nothing written
    assert not (folder / "config.pbtxt.bak").exists()

    edited = before.replace("max_batch_size: 8", "max_batch_size: 4")
    result = await server.config_files.write_model_config("add_sub", edited)
    assert result == {"name": "add_sub", "path": str(folder / "config.pbtxt"),
                      "backup": str(folder / "config.pbtxt.bak"), "restored_from": None,
                      "version": config_version("add_sub", edited.encode()), "reloaded": True,
                      "reason": "", "kept": True, "dependents": []}
    assert (folder / "config.pbtxt").read_text() == edited
    assert (folder / "config.pbtxt.bak").read_text() == before
    assert [p.name for p in folder.iterdir() if p.name.startswith(".")] == []
    assert (await server.model_config("add_sub")).max_batch_size == 4
    response = await server.infer(add_sub_request())
    np.testing.assert_array_equal(response.outputs[0].data, np.full((1, 16), 2, np.float32))

    reverted = await server.config_files.revert_model_config("add_sub")
    assert reverted["reloaded"] is True
    assert (await server.model_config("add_sub")).max_batch_size == 8


async def test_revert_restores_the_backup_once(explicit) -> None:
    """Revert was a toggle: the replaced file became the backup, so a second revert
    re-applied the edit (issue 30). Now the backup is used up."""
    server, folder = explicit
    before = (folder / "config.pbtxt").read_text()
    edited = before.replace("max_batch_size: 8", "max_batch_size: 4")
    await server.config_files.write_model_config("add_sub", edited)
    reverted = await server.config_files.revert_model_config("add_sub")
    assert reverted["restored_from"] == str(folder / "config.pbtxt.bak") and reverted["backup"] is None
    assert reverted["version"] == config_version("add_sub", before.encode())
    assert (folder / "config.pbtxt").read_text() == before
    assert not (folder / "config.pbtxt.bak").exists()
    assert not (await server.config_files.model_config_file("add_sub"))["backup_exists"]
    with pytest.raises(ModelNotFound, match="no config backup"):
        await server.config_files.revert_model_config("add_sub")
    assert (folder / "config.pbtxt").read_text() == before
    assert (await server.model_config("add_sub")).max_batch_size == 8


async def test_a_write_based_on_a_stale_file_is_refused(explicit) -> None:
    """Apply after the file changed (another tab applied, an editor saved) wrote over the
    change; with the version the text was read from it is refused and nothing is written."""
    server, folder = explicit
    read = await server.config_files.model_config_file("add_sub")
    assert read["version"] == config_version("add_sub", read["text"].encode())
    theirs = read["text"].replace("max_batch_size: 8", "max_batch_size: 6")
    mine = read["text"].replace("max_batch_size: 8", "max_batch_size: 2")
    await server.config_files.write_model_config("add_sub", theirs, expected_version=read["version"])
    with pytest.raises(ConfigConflict, match=r"changed since this text was read from it") as refused:
        await server.config_files.write_model_config("add_sub", mine, expected_version=read["version"])
    assert str(folder / "config.pbtxt") in refused.value.message
    assert (folder / "config.pbtxt").read_text() == theirs
    assert (folder / "config.pbtxt.bak").read_text() == read["text"]  # the backup of theirs
    (folder / "config.pbtxt").write_text(theirs + "# an editor saved\n")
    now = await server.config_files.model_config_file("add_sub")
    with pytest.raises(ConfigConflict):
        await server.config_files.revert_model_config("add_sub", expected_version=read["version"])
    assert (folder / "config.pbtxt.bak").exists()  # not used up by the refused revert
    result = await server.config_files.write_model_config("add_sub", mine, expected_version=now["version"])
    assert result["reloaded"] and (folder / "config.pbtxt").read_text() == mine


async def test_a_text_read_from_another_model_is_refused(tmp_path: Path) -> None:
    """The editor held model A's text while B was selected, and Apply wrote A's config into
    B's file (issue 30): the version names the model it was read from."""
    write_add_sub(tmp_path, name="a")
    write_add_sub(tmp_path, name="b")
    async with Server(ServerOptions(model_repository=[str(tmp_path)], model_control_mode="explicit",
                                    load_model=["a", "b"])) as server:
        a = await server.config_files.model_config_file("a")
        b_before = (tmp_path / "b" / "config.pbtxt").read_text()
        foreign = a["text"].replace('name: "a"', 'name: "b"')
        with pytest.raises(ConfigConflict, match="read from the config of model 'a', not of 'b'"):
            await server.config_files.write_model_config("b", foreign, expected_version=a["version"])
        assert (tmp_path / "b" / "config.pbtxt").read_text() == b_before
        assert not (tmp_path / "b" / "config.pbtxt.bak").exists()


async def test_a_write_that_fails_to_load_keeps_the_old_version_serving(explicit) -> None:
    """... and the file that served is put back: the new text left on disk would stop the next
    start under --exit-on-error (it did stay; new-user trial of issue 30)."""
    server, folder = explicit
    original = (folder / "config.pbtxt").read_text()
    text = original.replace("max_batch_size: 8", "max_batch_size: 4")
    (folder / "1" / "model.onnx").write_bytes(b"not an onnx model")  # the file, not the config
    result = await server.config_files.write_model_config("add_sub", text)
    assert result["reloaded"] is False and "add_sub" in result["reason"]
    assert result["kept"] is False and result["reason"].endswith(f"not kept: {folder / 'config.pbtxt'} holds "
                                                                 "the file that served before again")
    assert (folder / "config.pbtxt").read_text() == original
    assert not (folder / "config.pbtxt.bak").exists() and result["backup"] is None  # none before
    assert result["version"] == config_version("add_sub", original.encode())
    assert (await server.model_config("add_sub")).max_batch_size == 8
    await server.infer(add_sub_request())


async def test_a_write_that_fails_to_load_is_taken_back_with_its_backup(explicit) -> None:
    """A config that validates but does not load (KIND_GPU without a GPU in the new-user trial;
    here an ONNX Runtime thread count that is no integer): the file and its backup are as
    before the write, so Revert still reaches the original."""
    server, folder = explicit
    path, backup = folder / "config.pbtxt", folder / "config.pbtxt.bak"
    original = path.read_text()
    first = await server.config_files.write_model_config(
        "add_sub", original.replace("max_batch_size: 8", "max_batch_size: 4"))
    served = path.read_text()
    bad = served + 'parameters { key: "intra_op_thread_count" value { string_value: "abc" } }\n'
    assert await server.config_files.validate_model_config_text("add_sub", bad) == []
    result = await server.config_files.write_model_config("add_sub", bad, expected_version=first["version"])
    assert result["kept"] is False and "failed to convert 'intra_op_thread_count'" in result["reason"]
    assert path.read_text() == served and backup.read_text() == original
    assert result["version"] == first["version"] and result["backup"] == str(backup)
    assert (await server.model_config("add_sub")).max_batch_size == 4
    await server.infer(add_sub_request())
    reverted = await server.config_files.revert_model_config("add_sub", expected_version=result["version"])
    assert reverted["reloaded"] and path.read_text() == original


async def test_a_write_names_the_ensembles_it_leaves_unavailable(tmp_path: Path) -> None:
    """identity16's max_batch_size below its ensembles' takes them out of service: the write's
    result says which and why (the Apply banner said only "reloaded"; new-user trial)."""
    build_ensemble_repository(tmp_path)
    async with Server(ServerOptions(model_repository=[str(tmp_path)], model_control_mode="explicit",
                                    load_model=["*"])) as server:
        text = (tmp_path / "identity16" / "config.pbtxt").read_text()
        result = await server.config_files.write_model_config(
            "identity16", text.replace("max_batch_size: 8", "max_batch_size: 2"))
        assert result["reloaded"] and result["kept"]
        named = [line.split("'")[1] for line in result["dependents"]]
        assert "ens_chain" in named and "ens_diamond" in named
        chain = next(line for line in result["dependents"] if "'ens_chain'" in line)
        assert chain.startswith("ensemble 'ens_chain' is unavailable: ") and "identity16" in chain
        again = await server.config_files.write_model_config("identity16", text)
        assert again["dependents"] == []


async def test_write_without_reload_and_in_none_mode(tmp_path: Path) -> None:
    folder = write_add_sub(tmp_path)
    async with Server(ServerOptions(model_repository=[str(tmp_path)])) as server:
        text = add_sub_config("add_sub", 4, 1)
        result = await server.config_files.write_model_config("add_sub", text)
        assert result["reloaded"] is False and "'none'" in result["reason"]
        assert (folder / "config.pbtxt").read_text() == text
        assert (await server.model_config("add_sub")).max_batch_size == 8  # at the next start
        quiet = await server.config_files.write_model_config("add_sub", text, reload=False)
        assert quiet["reason"] == "not reloaded (reload=False)"


async def test_write_in_poll_mode_applies_through_a_poll(tmp_path: Path) -> None:
    write_add_sub(tmp_path)
    options = ServerOptions(model_repository=[str(tmp_path)], model_control_mode="poll",
                            repository_poll_secs=0)
    async with Server(options) as server:
        result = await server.config_files.write_model_config("add_sub", add_sub_config("add_sub", 2, 1))
        assert result["reloaded"] is True
        assert (await server.model_config("add_sub")).max_batch_size == 2


async def test_a_write_that_fails_to_load_in_poll_mode_is_taken_back(tmp_path: Path) -> None:
    """In poll mode a failed reload was answered "reloaded" (the old versions kept serving,
    with the failure as their reason), and the text stayed in the file."""
    folder = write_add_sub(tmp_path)
    options = ServerOptions(model_repository=[str(tmp_path)], model_control_mode="poll",
                            repository_poll_secs=0)
    async with Server(options) as server:
        original = (folder / "config.pbtxt").read_text()
        bad = (original.replace("max_batch_size: 8", "max_batch_size: 4")
               + 'parameters { key: "intra_op_thread_count" value { string_value: "abc" } }\n')
        result = await server.config_files.write_model_config("add_sub", bad)
        assert result["reloaded"] is False and result["kept"] is False
        assert result["reason"].startswith("load failed for model 'add_sub': ")
        assert "failed to convert 'intra_op_thread_count'" in result["reason"]
        assert (folder / "config.pbtxt").read_text() == original
        await server.poll_repository()
        assert (await server.model_config("add_sub")).max_batch_size == 8
        await server.infer(add_sub_request())


async def test_revert_without_backup(explicit) -> None:
    server, _ = explicit
    with pytest.raises(ModelNotFound, match="no config backup"):
        await server.config_files.revert_model_config("add_sub")


async def test_ensemble_steps_are_checked_against_loaded_composing_models(tmp_path: Path) -> None:
    build_ensemble_repository(tmp_path)
    async with Server(ServerOptions(model_repository=[str(tmp_path)])) as server:
        ensembles = [row["name"] for row in await server.repository_index()
                     if (await server.model_config(row["name"])).platform == "ensemble"]
        name = ensembles[0]
        text = (await server.config_files.model_config_file(name))["text"]
        assert await server.config_files.validate_model_config_text(name, text) == []
        step_model = (await server.model_config(name)).ensemble_scheduling.step[0]
        key = next(iter(step_model.input_map))
        broken = text.replace(f'key: "{key}"', 'key: "NO_SUCH_INPUT"', 1)
        assert broken != text
        [problem] = await server.config_files.validate_model_config_text(name, broken)
        assert "NO_SUCH_INPUT" in problem.message and problem.line is not None
