"""The Models tab against the real engine: table rows with state and memory, load / unload /
reload, version policy overrides, errors shown in place."""

from __future__ import annotations

from pathlib import Path

from ui_helpers import index_states

from workbench import Server, ServerOptions
from workbench.ui.models_view import ModelsView
from workbench.ui.store import EngineStore


async def models_view(store: EngineStore) -> ModelsView:
    view = ModelsView(store)
    await view.refresh()
    return view


def table_rows(view: ModelsView) -> dict[tuple[str, str], dict]:
    return {(r["model"], r["version"]): r for r in view.table.value.to_dict("records")}


async def test_table_lists_every_version_with_state_and_memory(store: EngineStore) -> None:
    view = await models_view(store)
    rows = table_rows(view)
    assert set(rows) == {("add_sub", "1"), ("digits_mlp", "1"), ("digits_mlp", "2")}
    assert {r["state"] for r in rows.values()} == {"READY"}
    assert rows[("digits_mlp", "2")]["memory"].startswith("CPU ")
    assert view.model.options == ["add_sub", "digits_mlp"]
    view.table.selection = [1]  # clicking a row selects its model
    assert view.model.value == "digits_mlp"


async def test_unload_load_and_reload_buttons_drive_the_engine(server: Server, store: EngineStore) -> None:
    view = await models_view(store)
    view.model.value = "add_sub"
    view.unload_button.clicks += 1
    await store.settle()
    assert await index_states(server, "add_sub") == {"1": ("UNAVAILABLE", "unloaded")}
    assert table_rows(view)[("add_sub", "1")]["reason"] == "unloaded"
    assert view.status.visible and "unloaded" in view.status.object
    view.load_button.clicks += 1
    await store.settle()
    assert await index_states(server, "add_sub") == {"1": ("READY", "")}
    view.reload_button.clicks += 1
    await store.settle()
    assert view.status.object == "'add_sub' reloaded" and not view.error.visible


async def test_version_policy_is_loaded_as_an_override_without_writing_the_file(
        server: Server, store: EngineStore, repository: Path) -> None:
    before = (repository / "digits_mlp" / "config.pbtxt").read_text()
    view = await models_view(store)
    view.model.value = "digits_mlp"
    await store.settle()
    assert (view.policy_kind.value, view.num_versions.value) == ("latest", 2)  # from the config
    view.policy_kind.value, view.versions.value = "specific", "1"
    view.policy_button.clicks += 1
    await store.settle()
    states = await index_states(server, "digits_mlp")
    assert states["1"] == ("READY", "") and states["2"][0] == "UNAVAILABLE"
    assert (repository / "digits_mlp" / "config.pbtxt").read_text() == before
    view.policy_kind.value = "all"
    view.policy_button.clicks += 1
    await store.settle()
    assert {v: s for v, (s, _) in (await index_states(server, "digits_mlp")).items()} == {
        "1": "READY", "2": "READY"}


async def test_a_bad_policy_and_engine_errors_are_shown_without_traceback(
        server: Server, store: EngineStore) -> None:
    view = await models_view(store)
    view.model.value = "digits_mlp"
    await store.settle()  # the policy controls show the model's policy
    view.policy_kind.value, view.versions.value = "specific", "one, two"
    view.policy_button.clicks += 1
    await store.settle()
    assert view.error.visible and "not a list of version numbers" in view.error.object
    view.versions.value = "7"  # no such version folder: the load fails, version 1 and 2 serve on
    view.policy_button.clicks += 1
    await store.settle()
    assert view.error.object.startswith("InvalidArgument: load failed for model 'digits_mlp'")
    assert "Traceback" not in view.error.object
    assert {s for s, _ in (await index_states(server, "digits_mlp")).values()} == {"READY"}


async def test_load_in_another_control_mode_shows_the_engines_refusal(repository: Path) -> None:
    async with Server(ServerOptions(model_repository=[str(repository)])) as server:  # mode none
        store = EngineStore(server)
        view = await models_view(store)
        view.model.value = "add_sub"
        view.unload_button.clicks += 1
        await store.settle()
        assert view.error.visible and not view.status.visible
        assert view.error.object == ("Unavailable: explicit model load / unload is not allowed "
                                     "if polling is enabled")
        assert await index_states(server, "add_sub") == {"1": ("READY", "")}
