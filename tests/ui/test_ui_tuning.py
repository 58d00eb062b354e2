"""The Tuning tab against the real engine: a sweep driven through the widgets fills the plot
and the table point by point, the knee and best-under-target marks agree with
``workbench.perf``, Stop cancels mid-sweep, candidates are tried and the file's config comes
back, Apply best writes config.pbtxt, errors are shown in place."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.ui.ui_helpers import add_sub_request, render_root
from workbench import Server
from workbench.config_edits.knobs import parse_text, read_knobs
from workbench.perf import best_under_sla, knee
from workbench.ui.config_view import ConfigView
from workbench.ui.store import EngineStore
from workbench.ui.tuning_view import SERVED, TuningView


async def tab(store: EngineStore, model: str = "add_sub", levels: str = "1, 2, 4") -> TuningView:
    """The view with a short sweep in its form (warm-up 50 ms, 250 ms windows)."""
    view = TuningView(store)
    await view.refresh_models()
    form = view.form
    form.model.value, form.levels.value = model, levels
    form.warmup_ms.value, form.interval_ms.value = 50, 250
    return view


async def run(view: TuningView, store: EngineStore) -> None:
    view.run_button.clicks += 1  # as a click in the browser does
    await store.settle()


def column(view: TuningView, setting: str, name: str) -> list:
    return list(view.plot.sources[setting].data[name])


async def test_a_sweep_fills_plot_and_table_and_marks_knee_and_target(store: EngineStore) -> None:
    view = await tab(store)
    await run(view, store)
    assert not view.error.visible, view.error.object
    results = view.results[SERVED]
    assert [str(r.level) for r in results] == ["Concurrency: 1", "Concurrency: 2", "Concurrency: 4"]
    assert column(view, SERVED, "level") == ["Concurrency: 1", "Concurrency: 2", "Concurrency: 4"]
    assert all(x > 0 for x in column(view, SERVED, "throughput"))
    assert column(view, SERVED, "p99_ms") == [r.p99_us / 1000 for r in results]
    table = view.table.value
    assert list(table["Setting"]) == [SERVED] * 3 and list(table["Concurrency"]) == [1, 2, 4]
    assert list(table["p99 latency"]) == [r.p99_us for r in results]
    assert {"Inferences/Second", "Server Queue", "p50 latency"} <= set(table.columns)
    assert view.steps_done == 3 and not view.running and view.status.object.startswith("done")
    expected = knee(results)
    assert list(view.plot.knees.data["level"]) == ([str(expected.level)] if expected else [])
    # without a target the best is the highest throughput; the served config wins, nothing to apply
    assert view.best == SERVED and view.apply_button.disabled
    assert render_root(view) is not None  # renders to Bokeh models, data included
    # a target between the lowest and the highest p99 picks best_under_sla's step
    p99s = sorted(r.p99_us for r in results)
    view.form.sla_ms.value = (p99s[0] + p99s[-1]) / 2 / 1000
    chosen = best_under_sla(results, (p99s[0] + p99s[-1]) / 2)
    assert chosen is not None
    assert list(view.plot.best.data["level"]) == [str(chosen.level)]
    assert view.plot.sla.visible and view.plot.sla.location == view.form.sla_ms.value
    assert f"best (p99 ≤ {view.form.sla_ms.value:g} ms): {chosen.level}" in view.summary.object
    # a target no step meets: no best
    view.form.sla_ms.value = (p99s[0] - 1) / 1000 if p99s[0] > 1 else 0.0001
    assert list(view.plot.best.data["level"]) == [] and view.best is None


async def test_request_rate_mode_sweeps_rates(store: EngineStore) -> None:
    view = await tab(store, levels="1, 2, 4, 8, 16")  # concurrency's default list
    view.form.mode.value = "request rate"
    assert view.form.levels.value == "100, 200, 400, 800, 1600"  # the mode's default list
    view.form.levels.value = "50:150:50"
    await run(view, store)
    assert not view.error.visible, view.error.object
    assert list(view.table.value["Request Rate"]) == [50.0, 100.0, 150.0]
    assert all(x > 0 for x in column(view, SERVED, "throughput"))


async def test_stop_cancels_mid_sweep_and_the_engine_still_serves(server: Server,
                                                                   store: EngineStore) -> None:
    view = await tab(store, levels="1:10:1")
    # Stop as soon as the first step arrives (a watcher runs inside the run's own callback)
    view.param.watch(lambda event: view.stop() if event.new == 1 else None, "steps_done")
    await run(view, store)
    assert len(column(view, SERVED, "throughput")) == 1 and len(view.table.value) == 1
    assert view._task is not None and view._task.cancelled()
    assert not view.error.visible
    assert view.status.object.startswith("stopped: 1 step measured")
    assert not view.running and not view.run_button.disabled and view.stop_button.disabled
    response = await server.infer(add_sub_request())
    assert response.outputs[0].data.shape == (1, 16)


async def test_stop_before_the_run_began_leaves_the_tab_ready(store: EngineStore) -> None:
    view = await tab(store)
    task = view.start()
    view.stop()
    await store.settle()
    assert task is not None and task.cancelled() and view.results == {} and not view.error.visible
    assert not view.running and not view.run_button.disabled
    assert view.status.object.startswith("stopped: 0 steps")


async def test_compare_tries_two_delays_as_series_and_restores_the_file_config(
        server: Server, store: EngineStore, repository: Path) -> None:
    path = repository / "add_sub" / "config.pbtxt"
    before_text = path.read_text()
    before = await server.model_config("add_sub")
    view = await tab(store, levels="1, 2, 4")
    view.form.include_served.value = False
    view.form.candidates.value = "max_queue_delay_us=100\n# a comment\nmax_queue_delay_us=2000\n"
    served_delays: list[int] = []

    async def note_delay() -> None:
        served_delays.append(read_knobs(await server.model_config("add_sub")).max_queue_delay_us)

    # after each series' first step (two more follow), note what the engine serves
    view.param.watch(lambda e: store.spawn(note_delay()) if e.new in (1, 4) else None,
                     "steps_done")
    await run(view, store)
    assert not view.error.visible, view.error.object
    assert list(view.results) == ["max_queue_delay_us=100", "max_queue_delay_us=2000"]
    assert set(view.plot.sources) == set(view.results)
    for setting in view.results:
        assert len(column(view, setting, "throughput")) == 3
    assert list(view.table.value["Setting"]) == (["max_queue_delay_us=100"] * 3
                                                 + ["max_queue_delay_us=2000"] * 3)
    assert served_delays == [100, 2000]  # each candidate was loaded while measured
    assert path.read_text() == before_text  # tried, not written
    assert await server.model_config("add_sub") == before  # reloaded from the file
    assert view.best in view.results and not view.apply_button.disabled


async def test_a_candidate_the_engine_refuses_is_reported_and_skipped(
        server: Server, store: EngineStore) -> None:
    before = await server.model_config("add_sub")
    view = await tab(store, levels="1, 2")
    view.form.include_served.value = False
    view.form.candidates.value = "preferred_batch_sizes=64\nmax_queue_delay_us=100"
    await run(view, store)
    assert view.error.visible and view.error.object.startswith("preferred_batch_sizes=64: ")
    assert list(view.results) == ["max_queue_delay_us=100"]
    assert len(view.table.value) == 2 and view.status.object.startswith("done")
    assert await server.model_config("add_sub") == before


async def test_apply_best_writes_the_candidate_into_config_pbtxt(
        server: Server, store: EngineStore, repository: Path) -> None:
    path = repository / "add_sub" / "config.pbtxt"
    original = path.read_text()
    view = await tab(store, levels="1, 2")
    view.form.include_served.value = False
    view.form.candidates.value = "max_queue_delay_us=300 preferred_batch_sizes=2,4"
    await run(view, store)
    assert view.best == "max_queue_delay_us=300 preferred_batch_sizes=2,4"
    assert not view.apply_button.disabled
    view.apply_button.clicks += 1
    await store.settle()
    assert not view.error.visible, view.error.object
    written = path.read_text()
    assert Path(f"{path}.bak").read_text() == original
    knobs = read_knobs(parse_text(written))
    assert (knobs.max_queue_delay_us, knobs.preferred_batch_sizes) == (300, (2, 4))
    assert written.splitlines()[:3] == original.splitlines()[:3]  # the rest of the file kept
    served = read_knobs(await server.model_config("add_sub"))
    assert (served.max_queue_delay_us, served.preferred_batch_sizes) == (300, (2, 4))  # reloaded
    assert view.status.alert_type == "success" and "reloaded" in view.status.object


async def test_apply_best_keeps_a_hand_written_blocks_comment_indent_and_list_style(
        server: Server, store: EngineStore, repository: Path) -> None:
    """Apply best rewrote a hand-written dynamic_batching block as text_format prints it:
    its comment deleted, 4-space indent made 2, `[ 4, 8 ]` made repeated fields (issue 30)."""
    path = repository / "add_sub" / "config.pbtxt"
    hand_written = path.read_text().replace("dynamic_batching { }", (
        "dynamic_batching {\n"
        "    # full batches first\n"
        "    preferred_batch_size: [ 4, 8 ]\n"
        "    max_queue_delay_microseconds: 100\n"
        "}"))
    path.write_text(hand_written)
    await server.load_model("add_sub")
    view = await tab(store, levels="1")
    view.form.include_served.value = False
    view.form.candidates.value = "max_queue_delay_us=300 preferred_batch_sizes=2,4"
    await run(view, store)
    view.apply_button.clicks += 1
    await store.settle()
    assert view.status.alert_type == "success", (view.status.object, view.error.object)
    assert path.read_text() == hand_written.replace("[ 4, 8 ]", "[ 2, 4 ]").replace(
        "max_queue_delay_microseconds: 100", "max_queue_delay_microseconds: 300")


async def test_after_apply_best_the_config_tab_shows_the_tuned_model_with_its_new_file(
        server: Server, store: EngineStore) -> None:
    config = ConfigView(store)
    await config.refresh_models()
    store.selection.choose("digits_mlp")  # a person's choice in another tab
    await server.unload_model("digits_mlp")  # so the Tuning tab does not offer it
    await store.settle()
    assert config.model_name == "digits_mlp"
    view = await tab(store, levels="1")
    assert view.form.model.value == "add_sub"  # its own choice: the selection is not offered
    view.form.include_served.value = False
    view.form.candidates.value = "max_queue_delay_us=300"
    await run(view, store)
    view.apply_button.clicks += 1
    await store.settle()
    assert view.status.alert_type == "success", view.status.object
    # the tuned model is the session's selection: the Config tab shows it, with the new file
    assert store.selection.name == "add_sub"
    assert config.model.value == config.model_name == "add_sub"
    assert "max_queue_delay_microseconds: 300" in config.editor.value
    assert config.editor.value == config.disk_text and "max queue delay 300 µs" in config.served.object


async def test_a_bad_input_data_file_is_shown_in_place(store: EngineStore, tmp_path: Path) -> None:
    view = await tab(store)
    bad = tmp_path / "data.json"
    bad.write_text(json.dumps({"data": [{"NOT_AN_INPUT": [1.0] * 16}]}))
    view.form.input.value, view.form.path.value = "JSON file", str(bad)
    await run(view, store)
    assert view.error.visible
    assert "The input or output 'NOT_AN_INPUT' is not found" in view.error.object
    assert view.results == {} and view.steps_done == 0 and view.status.object.startswith("failed")


async def test_real_data_from_an_uploaded_json_file_is_swept(store: EngineStore) -> None:
    view = await tab(store, levels="1, 2")
    data = {"data": [{"INPUT0": [1.0] * 16, "INPUT1": [2.0] * 16}]}
    view.form.upload.filename = "mine.json"
    view.form.upload.value = json.dumps(data).encode()
    assert view.form.input.value == "JSON file" and (view.form.path.value or "").endswith("mine.json")
    await run(view, store)
    assert not view.error.visible, view.error.object
    assert len(view.table.value) == 2


@pytest.mark.parametrize("change, message", [
    ({"levels": "1, two"}, "'two' is not a number"),
    ({"levels": "0.5"}, "concurrency must be a whole number"),
    ({"candidates": "max_queue_delay=5"}, "unknown knob 'max_queue_delay'"),
    ({"path": "/no/such.json", "input": "JSON file"}, "is neither 'random', 'zero' nor a file"),
])
async def test_a_bad_form_is_refused_in_place(store: EngineStore, change: dict, message: str) -> None:
    view = await tab(store)
    for name, value in change.items():
        getattr(view.form, name).value = value
    assert view.start() is None
    assert view.error.visible and message in view.error.object
    assert not view.running and view.results == {}


async def test_a_model_that_is_not_ready_is_reported(server: Server, store: EngineStore) -> None:
    view = await tab(store)
    await server.unload_model("add_sub")
    await run(view, store)
    assert view.error.visible and "add_sub" in view.error.object
    assert "Traceback" not in view.error.object and view.results == {}


async def test_the_model_list_offers_only_models_it_can_sweep_and_says_why(
        server: Server, store: EngineStore, repository: Path, sample_repository: Path) -> None:
    import shutil

    shutil.copytree(sample_repository / "accumulator", repository / "accumulator")
    await server.load_model("accumulator")  # READY, but a sequence model
    await server.unload_model("digits_mlp")
    view = TuningView(store)
    await view.refresh_models()
    assert view.form.model.options == ["add_sub"] and view.form.model.value == "add_sub"
    assert view.reasons == {"accumulator": "a sequence model (the load generator sends no sequences)",
                            "digits_mlp": "not loaded (load it in the Models tab)"}
    assert "**accumulator**: a sequence model" in view.not_offered.object
    assert "**digits_mlp**: not loaded" in view.not_offered.object
    # the knobs the chosen model is served with, in a candidate's words
    assert "**add_sub** is served now with: max_batch_size=8 dynamic_batching=true" in view.served.object
    await server.unload_model("add_sub")
    await view.refresh_models()
    assert view.form.model.options == [] and view.run_button.disabled


async def test_each_action_clears_the_banners_of_the_one_before(store: EngineStore) -> None:
    view = await tab(store, levels="1")
    await run(view, store)
    assert view.status.visible and view.status.object.startswith("done")
    view.form.levels.value = "1, two"
    assert view.start() is None
    assert view.error.visible and not view.status.visible  # no "done" beside the refusal
    view.form.levels.value = "1"
    await run(view, store)
    assert not view.error.visible and view.status.object.startswith("done")
    # nothing to apply: the button is disabled and says why
    assert view.apply_button.disabled
    assert view.apply_button.description == "no tested candidate beats the served config: nothing to apply"


async def test_engine_errors_are_shown_without_python_exception_names(
        server: Server, store: EngineStore) -> None:
    view = await tab(store)
    await server.unload_model("add_sub")
    await run(view, store)
    text = view.error.object
    assert view.error.visible and "add_sub" in text
    first_word = text.split()[0].rstrip(":")
    assert not first_word.startswith(("Model", "Invalid", "Runtime")) and "Error:" not in text, text
    assert view.status.object.startswith("failed")
