"""Config editing through the extension's REST API: read, validate with line numbers, write
with backup and hot reload, revert; on the real engine and the real add_sub model."""

from __future__ import annotations

from pathlib import Path

from workbench.jupyter.host import EngineHost
from workbench.testing.reload import add_sub_config


async def test_get_returns_the_file_and_the_served_config(workbench: EngineHost, api, model_repository: Path) -> None:
    status, body = await api("models", "add_sub", "config")
    assert status == 200
    assert body["file"]["text"] == (model_repository / "add_sub" / "config.pbtxt").read_text()
    assert body["file"]["exists"] and body["file"]["writable"] and not body["file"]["backup_exists"]
    assert body["config"]["max_batch_size"] == 8 and body["config"]["name"] == "add_sub"
    assert body["config_reason"] == ""


async def test_get_of_an_unloaded_model_has_the_file_and_why_no_config(workbench: EngineHost, api) -> None:
    assert (await api("models", "digits_mlp", "unload", method="POST"))[0] == 200
    status, body = await api("models", "digits_mlp", "config")
    assert status == 200 and body["file"]["exists"] and body["config"] is None
    assert "digits_mlp" in body["config_reason"]


async def test_unknown_model_is_404_with_the_engines_message(workbench: EngineHost, api) -> None:
    status, body = await api("models", "nope", "config")
    assert status == 404 and body["reason"] == "NOT_FOUND"
    assert body["message"] == "model 'nope' is not in the model repository"


async def test_validate_reports_problems_with_line_numbers(workbench: EngineHost, api) -> None:
    good = add_sub_config("add_sub", 8, 2)
    assert await api("models", "add_sub", "config", "validate", method="POST", body={"text": good}) == (
        200, {"problems": []})
    broken = good.replace("TYPE_FP32", "TYPE_NOPE", 1)
    line = next(i for i, text in enumerate(broken.splitlines(), 1) if "TYPE_NOPE" in text)
    status, body = await api("models", "add_sub", "config", "validate", method="POST", body={"text": broken})
    assert status == 200
    [problem] = body["problems"]
    assert problem["kind"] == "syntax" and problem["line"] == line and "TYPE_NOPE" in problem["message"]


async def test_validate_needs_a_text(workbench: EngineHost, api) -> None:
    status, body = await api("models", "add_sub", "config", "validate", method="POST", body={"txt": "x"})
    assert status == 400 and "text" in body["message"]


async def test_put_writes_keeps_a_backup_and_reloads(workbench: EngineHost, api, model_repository: Path) -> None:
    path = model_repository / "add_sub" / "config.pbtxt"
    before = path.read_text()
    edited = add_sub_config("add_sub", 16, 1)
    status, result = await api("models", "add_sub", "config", method="PUT", body={"text": edited})
    assert status == 200, result
    assert result["reloaded"] and result["reason"] == "" and result["path"] == str(path)
    assert path.read_text() == edited
    assert Path(result["backup"]).read_text() == before
    served = (await api("models", "add_sub", "config"))[1]
    assert served["config"]["max_batch_size"] == 16 and served["file"]["backup_exists"]

    status, reverted = await api("models", "add_sub", "config", "revert", method="POST")
    assert status == 200 and reverted["reloaded"]
    assert reverted["restored_from"] == result["backup"] and reverted["backup"] is None
    assert path.read_text() == before
    after = (await api("models", "add_sub", "config"))[1]
    assert after["config"]["max_batch_size"] == 8 and not after["file"]["backup_exists"]
    status, again = await api("models", "add_sub", "config", "revert", method="POST")
    assert status == 404 and "no config backup" in again["message"]  # once: it is used up
    assert path.read_text() == before


async def test_a_put_based_on_a_stale_version_is_409_and_writes_nothing(
        workbench: EngineHost, api, model_repository: Path) -> None:
    path = model_repository / "add_sub" / "config.pbtxt"
    read = (await api("models", "add_sub", "config"))[1]["file"]
    theirs, mine = add_sub_config("add_sub", 6, 1), add_sub_config("add_sub", 2, 1)
    status, written = await api("models", "add_sub", "config", method="PUT",
                                body={"text": theirs, "version": read["version"]})
    assert status == 200 and written["version"] != read["version"]
    status, body = await api("models", "add_sub", "config", method="PUT",
                             body={"text": mine, "version": read["version"]})
    assert status == 409 and body["reason"] == "INVALID_ARG"
    assert "changed since this text was read" in body["message"]
    assert path.read_text() == theirs
    status, body = await api("models", "add_sub", "config", "revert", method="POST",
                             body={"version": read["version"]})
    assert status == 409 and path.read_text() == theirs
    digits = (await api("models", "digits_mlp", "config"))[1]["file"]
    status, body = await api("models", "add_sub", "config", method="PUT",
                             body={"text": mine, "version": digits["version"]})
    assert status == 409 and "model 'digits_mlp', not of 'add_sub'" in body["message"]
    assert (await api("models", "add_sub", "config", method="PUT",
                      body={"text": mine, "version": 3}))[0] == 400
    status, _ = await api("models", "add_sub", "config", method="PUT",
                          body={"text": mine, "version": written["version"]})
    assert status == 200 and path.read_text() == mine


async def test_invalid_put_writes_nothing_and_lists_the_problems(workbench: EngineHost, api,
                                                                 model_repository: Path) -> None:
    path = model_repository / "add_sub" / "config.pbtxt"
    before = path.read_text()
    text = add_sub_config("add_sub", 8, 2).replace("max_batch_size: 8", "max_batch_size: -3")
    status, body = await api("models", "add_sub", "config", method="PUT", body={"text": text})
    assert status == 400 and body["reason"] == "INVALID_ARG"
    assert "is not valid" in body["message"] and body["problems"]
    assert body["problems"][0]["line"] == text.splitlines().index("max_batch_size: -3") + 1
    assert path.read_text() == before and not path.with_name("config.pbtxt.bak").exists()
    assert (await api("models", "add_sub", "config"))[1]["config"]["max_batch_size"] == 8


async def test_revert_without_a_backup_is_404(workbench: EngineHost, api) -> None:
    status, body = await api("models", "add_sub", "config", "revert", method="POST")
    assert status == 404 and "no config backup" in body["message"]
