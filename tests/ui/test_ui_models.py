"""The Models tab against the real engine: table rows with state and memory, load / unload /
reload, version policy overrides, errors shown in place."""

from __future__ import annotations

import math
from pathlib import Path

from panel.models.tabulator import CellClickEvent

from tests.ui.ui_helpers import add_sub_request, index_states
from workbench import Server, ServerOptions
from workbench.serving.live_stats import LiveStatistics
from workbench.ui.app import Dashboard
from workbench.ui.models.model_rows import model_rows
from workbench.ui.models.models_view import ModelsView, first_model
from workbench.ui.shared.store import EngineStore


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
    # ONNX Runtime reports nothing: the loader's estimate (the process's RSS growth over the
    # load), marked, with how it was measured; a tiny model on a busy machine may show no
    # growth at all, which reads "not measured", never "0 B"
    v2 = rows[("digits_mlp", "2")]
    assert v2["memory_text"].startswith("CPU ≈ ") or "not measured" in v2["memory_text"], v2
    assert "0 B" not in v2["memory_text"]
    if v2["memory_text"].startswith("CPU ≈ "):
        assert v2["memory"] > 0 and "estimate" in v2["memory_note"]
    assert view.model.options == ["add_sub", "digits_mlp"]
    view.table.selection = [1]  # clicking a row selects its model
    assert view.model.value == "digits_mlp"
    assert store.selection.name == "digits_mlp"  # and the session's selection


async def test_table_shows_backend_instances_batching_and_live_traffic(
        server: Server, store: EngineStore) -> None:
    live = LiveStatistics(server)
    try:
        view = ModelsView(store, live=live)
        for _ in range(5):
            await server.infer(add_sub_request())
        live.sample()  # the interval the dashboard's beat closes
        await view.refresh()
    finally:
        live.close()
    add_sub = table_rows(view)[("add_sub", "1")]
    assert (add_sub["backend"], add_sub["instances"], add_sub["max_batch_size"],
            add_sub["batching"]) == ("onnxruntime", "1 × CPU", 8, "dynamic")
    assert add_sub["requests_per_s"] > 0 and add_sub["p99_ms"] > 0 and add_sub["failures"] == 0
    digits = table_rows(view)[("digits_mlp", "1")]
    assert digits["requests_per_s"] == 0 and math.isnan(digits["p99_ms"])  # no traffic: "–"
    assert "UNAVAILABLE" not in add_sub.values()


async def test_the_table_follows_changes_made_elsewhere_on_each_beat(
        server: Server, store: EngineStore) -> None:
    view = await models_view(store)
    await server.unload_model("add_sub")  # the API, not the tab
    view.tick()
    await store.settle()
    add_sub = table_rows(view)[("add_sub", "1")]
    assert (add_sub["state"], add_sub["reason"]) == ("UNAVAILABLE", "unloaded")
    assert add_sub["backend"] == "" and math.isnan(add_sub["memory"])  # nothing served
    await server.load_model("add_sub")
    view.tick()
    await store.settle()
    assert table_rows(view)[("add_sub", "1")]["state"] == "READY"


async def test_a_rows_buttons_open_the_model_in_config_and_live(server: Server) -> None:
    board = Dashboard(server, tuning=None)
    try:
        await board.models.refresh()
        await board.config.refresh_models()
        board.live.tick()
        await board.store.settle()
        rows = board.models.table.value
        digits_2 = int(rows.index[(rows["model"] == "digits_mlp") & (rows["version"] == "2")][0])
        board.models.table._process_event(CellClickEvent(model=None, column="config", row=digits_2))
        await board.store.settle()
        assert board.tabs.active == 1  # Config
        assert board.config.model.value == "digits_mlp" and board.config.model_name == "digits_mlp"
        assert board.models.model.value == "digits_mlp"
        assert board.live.model.value == "digits_mlp/2"
        board.models.table._process_event(CellClickEvent(model=None, column="live", row=0))
        await board.store.settle()
        assert board.tabs.active == 2 and board.live.model.value == "add_sub/1"
        assert board.config.model.value == "add_sub"
    finally:
        board.close()


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
    assert view.error.object.startswith("load failed for model 'digits_mlp'")  # no exception name
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
        assert view.error.object == ("explicit model load / unload is not allowed "
                                     "if polling is enabled")
        assert await index_states(server, "add_sub") == {"1": ("READY", "")}


async def test_the_dashboard_opens_on_the_first_ready_model_that_serves_plain_requests(
        with_accumulator: Path) -> None:
    """A new user's finding (issue 35): the dashboard opened on the sequence-batched
    accumulator (the first name) rather than a model that serves plain requests."""
    async with Server(ServerOptions(model_repository=[str(with_accumulator)], model_control_mode="explicit",
                                    load_model=["*"])) as engine:
        store = EngineStore(engine)
        view = await models_view(store)
        assert table_rows(view)[("accumulator", "1")]["state"] == "READY"
        assert (store.selection.name, view.model.value) == ("add_sub", "add_sub")
        # with add_sub unloaded: digits_mlp; with only the accumulator READY: the accumulator
        await engine.unload_model("add_sub")
        rows = await model_rows(engine)
        assert first_model(rows) == "digits_mlp"
        await engine.unload_model("digits_mlp")
        assert first_model(await model_rows(engine)) == "accumulator"
        await engine.unload_model("accumulator")
        assert first_model(await model_rows(engine)) == "accumulator"  # none READY: the first
        assert first_model([]) == ""


async def test_the_live_columns_name_their_window_as_the_live_tab_does(server: Server) -> None:
    """The p99 column is the last beat's (1 s), not the Live tab's 30 s diagnosis window: its
    header says so (it said "p99 (ms)"), as do the live columns' tooltips; another beat is named."""
    board = Dashboard(server, tuning=None)
    try:
        table = board.models.table
        assert table.titles["p99_ms"] == "p99 1\u00a0s (ms)"
        assert "over the last 1\u00a0s" in table.header_tooltips["p99_ms"]
        assert "over the last 1\u00a0s" in table.header_tooltips["requests_per_s"]
    finally:
        board.close()
    board = Dashboard(server, tuning=None, interval_s=0.5)
    try:
        assert board.models.table.titles["p99_ms"] == "p99 0.5\u00a0s (ms)"
        board.start(2.0)
        assert board.models.table.titles["p99_ms"] == "p99 2\u00a0s (ms)"
    finally:
        board.close()
