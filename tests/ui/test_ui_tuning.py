"""The Tuning tab against the real engine (temporary copies of the models): the search space
is shown before the run, filled from the model and the machine; a run of the tuner driven
through the widgets plots every point and fills the table as it goes and ends with the
tuner's verdict; Stop gives a judged partial result that Resume continues; an unstable run
recommends nothing and Apply stays disabled with the reason; Apply writes config.pbtxt with
its comments kept and a backup; invalid input and engine errors are said in place, in words.

Windows are short (300 ms, 50 ms warm-up, 3 windows at most) and spaces tiny, so each run
takes seconds; what a run decides depends on the machine, so a test asserts a decision only
where its conditions fix it (stability 0.01 %: never stable; a served config far over the
SLA and a candidate far under it, with any three windows counted as agreeing)."""

from __future__ import annotations

from pathlib import Path

import pytest

from workbench import Server
from workbench.config_edits.knobs import parse_text, read_knobs
from workbench.tuning import Machine, default_space
from workbench.ui.shared.store import EngineStore
from workbench.ui.tuning.tuning_outcome import APPLIED
from workbench.ui.tuning.tuning_view import NOTHING_TO_RESUME, TuningView


async def tab(store: EngineStore, space: str = "instance_count=1,2", levels: str = "1, 2",
              model: str = "digits_mlp") -> TuningView:
    """The view on ``model`` with a short run in its form (the space typed after the
    prefill, as a person does)."""
    view = TuningView(store)
    await view.refresh_models()
    view.form.model.value = model
    await store.settle()  # the space and levels filled from the model
    form = view.form
    form.space.value, form.levels.value, form.sla_ms.value = space, levels, 1000.0
    form.warmup_ms.value, form.interval_ms.value, form.max_windows.value = 50, 300, 3
    return view


async def run(view: TuningView, store: EngineStore, button: str = "run_button") -> None:
    getattr(view, button).clicks += 1  # as a click in the browser does
    await store.settle()


async def test_the_space_is_shown_before_the_run_filled_from_the_model_and_the_machine(
        server: Server, store: EngineStore) -> None:
    view = TuningView(store)
    await view.refresh_models()
    view.form.model.value = "digits_mlp"
    await store.settle()
    expected = default_space(await server.model_config("digits_mlp"), Machine.read())
    assert view.form.space.value == expected.text() and "instance_count=" in view.form.space.value
    assert view.form.levels.value == ", ".join(f"{lv.value:g}" for lv in expected.levels)
    assert "**digits_mlp** is served now with: max_batch_size=64 dynamic_batching=true" in view.served.object
    assert view.resume_button.disabled and view.resume_button.description == NOTHING_TO_RESUME
    assert view.outcome.apply_button.disabled


async def test_a_space_typed_before_the_fill_lands_is_kept(server: Server, store: EngineStore) -> None:
    """A person types the space and levels while the fill from the model is still on its way
    (the served config is read asynchronously): the late fill keeps what they typed (it
    overwrote it, and the run measured the default space: CI's browser test)."""
    view = TuningView(store)
    await view.refresh_models()
    view.form.model.value = "digits_mlp"  # the fill is spawned, not done
    view.form.space.value, view.form.levels.value = "max_queue_delay_us=0,50000", "1, 2"
    await store.settle()
    assert (view.form.space.value, view.form.levels.value) == ("max_queue_delay_us=0,50000", "1, 2")
    assert "**digits_mlp** is served now with" in view.served.object  # the rest of it landed


async def test_a_fill_of_the_same_model_again_keeps_what_was_typed_another_model_replaces_it(
        server: Server, store: EngineStore) -> None:
    """The model picked again after a person typed (since = the typed text): a fill for the
    model the form was filled for keeps the typing (it replaced it: CI's inline browser test
    measured the default space with the levels and SLA typed after it); a pick of another
    model fills the form for that model."""
    view = TuningView(store)
    await view.refresh_models()
    view.form.model.value = "digits_mlp"
    await store.settle()
    typed = ("max_queue_delay_us=0,50000", view.form.levels.value)
    view.form.space.value = typed[0]
    await view.show_served("digits_mlp", prefill=view.form.typed())  # the same model's fill again
    assert view.form.typed() == typed
    view.form.model.value = "add_sub"
    await store.settle()
    expected = default_space(await server.model_config("add_sub"), Machine.read())
    assert view.form.space.value == expected.text() != typed[0]


async def test_the_size_of_the_search_is_said_as_the_space_and_levels_change(
        server: Server, store: EngineStore) -> None:
    view = await tab(store, space="max_queue_delay_us=0,50000", levels="1, 2")
    assert "The search: 2 settings × 2 load levels" in view.form.size.object
    view.form.space.value = "instance_count=1,2,3 max_queue_delay_us=0,100"
    view.form.levels.value = "4"
    assert "The search: 6 settings × 1 load level " in view.form.size.object
    view.form.space.value = "instance_count=x"
    assert view.form.size.object.startswith("*Not a search space yet: ")
    view.form.space.value = "instance_count=1"
    view.form.levels.value = "4:1"
    assert view.form.size.object == "*Not a search space yet: '4:1': need 0 < start <= end*"


async def test_a_run_plots_every_point_fills_the_table_and_ends_with_the_verdict(
        server: Server, store: EngineStore) -> None:
    before = await server.model_config("digits_mlp")
    view = await tab(store)
    seen: list[int] = []
    view.param.watch(lambda e: seen.append(len(view.table.value)), "points_done")  # rows as points come
    await run(view, store)
    assert not view.error.visible, view.error.object
    result = view.outcome.result
    assert result is not None and len(result.points) >= 2
    assert seen == list(range(1, len(result.points) + 1))  # each point's row as it was measured
    labels = {p.setting.label for p in result.points}
    assert set(view.plot.sources) == labels and labels <= {"instance_count=1", "instance_count=2"}
    assert sum(len(s.data["throughput"]) for s in view.plot.sources.values()) == len(result.points)
    table = view.table.value
    assert list(table["setting"]) == [p.setting.label for p in result.points]
    assert list(table["windows"]) == [len(p.windows) for p in result.points]
    assert set(table["stable"]) <= {True, False}
    assert result.decision.why in view.outcome.verdict.object
    apply = view.outcome.apply_button
    assert apply.disabled is not result.decision.apply
    assert apply.description == (None if result.decision.apply else result.decision.why)
    assert view.status.object.startswith(f"done: {len(result.points)} points measured")
    assert not view.running and view.stop_button.disabled and not view.run_button.disabled
    csv, html = view.outcome.downloads["CSV"], view.outcome.downloads["HTML report"]
    assert not csv.disabled and csv.filename == "digits_mlp-tuning.csv"
    assert callable(csv.callback) and callable(html.callback)
    assert csv.callback().read().decode().count("\n") == len(result.points) + 1  # header + a row each
    assert b"<svg" in html.callback().read()
    assert await server.model_config("digits_mlp") == before  # candidates were temporary loads


async def test_stop_mid_run_shows_a_judged_partial_result_and_resume_continues_it(
        server: Server, store: EngineStore) -> None:
    view = await tab(store)
    # Stop as soon as the first point arrives (a watcher runs inside the run's own callback)
    stop = view.param.watch(lambda e: view.stop() if e.new == 1 else None, "points_done")
    await run(view, store)
    result = view.outcome.result
    assert result is not None and result.stopped and len(result.points) == 1
    assert "stopped" in view.outcome.verdict.object and result.decision.why in view.outcome.verdict.object
    assert view.status.object.startswith("stopped: 1 points measured")
    assert view.outcome.apply_button.disabled is not result.decision.apply
    assert not view.resume_button.disabled and view.resume_button.description is None
    view.param.unwatch(stop)
    await run(view, store, "resume_button")
    resumed = view.outcome.result
    assert resumed is not None and not resumed.stopped, view.error.object
    assert resumed.points[0].from_resume and resumed.points[0].setting == result.points[0].setting
    assert len(resumed.points) > 1 and resumed.measurements == len(resumed.points) - 1
    assert view.resume_button.disabled  # nothing stopped to continue now


async def test_an_unstable_run_recommends_nothing_and_apply_stays_disabled_with_the_reason(
        store: EngineStore, repository: Path) -> None:
    path = repository / "digits_mlp" / "config.pbtxt"
    original = path.read_text()
    view = await tab(store, levels="1")
    view.form.stability.value = 0.01  # three windows never agree within 0.01 %
    await run(view, store)
    result = view.outcome.result
    assert result is not None and result.points and not any(p.stable for p in result.points)
    assert result.decision.chosen is None and not result.decision.apply
    apply = view.outcome.apply_button
    assert apply.disabled and (apply.description or "").startswith("every measurement was unstable")
    assert view.outcome.verdict.object.startswith("**Result:** every measurement was unstable")
    assert set(view.plot.sources[p.setting.label].data["fill_alpha"][0] for p in result.points) == {0.0}  # hollow
    assert list(view.plot.chosen.data["throughput"]) == []  # no star
    await view.apply()  # as if the button were clicked anyway
    assert view.error.visible and view.error.object.startswith("every measurement was unstable")
    assert path.read_text() == original and not path.with_name("config.pbtxt.bak").exists()


async def test_apply_writes_the_chosen_setting_keeping_comments_with_a_backup(
        server: Server, store: EngineStore, repository: Path) -> None:
    """The served config waits 50 ms for a batch (far over a 20 ms SLA at any load), the
    candidate does not wait (far under it); a stability tolerance of 500 % counts any three
    windows as agreeing: the run recommends the candidate."""
    path = repository / "digits_mlp" / "config.pbtxt"
    path.write_text(path.read_text().replace("dynamic_batching { }",
                                             "dynamic_batching { max_queue_delay_microseconds: 50000 }"))
    await server.load_model("digits_mlp")
    original = path.read_text()
    view = await tab(store, space="max_queue_delay_us=0,50000")
    view.form.sla_ms.value, view.form.stability.value = 20.0, 500.0
    await run(view, store)
    result = view.outcome.result
    assert result is not None and result.chosen is not None, view.error.object
    assert result.decision.apply and result.chosen.setting.label == "max_queue_delay_us=0"
    assert list(view.plot.chosen.data["setting"]) == ["max_queue_delay_us=0"]  # starred
    assert "★" in list(view.table.value["chosen"])
    assert view.outcome.verdict.object.startswith("**Recommended:**")
    assert not view.outcome.apply_button.disabled
    view.outcome.apply_button.clicks += 1
    await store.settle()
    assert view.status.alert_type == "success", (view.status.object, view.error.object)
    assert view.status.object.startswith(f"wrote max_queue_delay_us=0 into {path}")
    assert view.status.object.endswith("; reloaded")
    written = path.read_text()
    assert read_knobs(parse_text(written)).max_queue_delay_us == 0
    assert path.with_name("config.pbtxt.bak").read_text() == original
    comments = [line for line in original.splitlines() if line.startswith("#")]
    assert comments and all(line in written.splitlines() for line in comments)  # comments kept
    assert read_knobs(await server.model_config("digits_mlp")).max_queue_delay_us == 0  # reloaded
    assert view.outcome.apply_button.disabled and view.outcome.apply_button.description == APPLIED
    assert store.selection.name == "digits_mlp"


@pytest.mark.parametrize("change, message", [
    ({"levels": "1, two"}, "'two' is not a number"),
    ({"levels": ""}, "name at least one load level"),
    ({"space": "max_queue_delay=5"}, "unknown knob 'max_queue_delay'"),
    ({"space": " "}, "the search space is empty"),
    ({"stability": 0.0}, "the stability percentage must be > 0"),
    ({"max_windows": 2}, "max_windows must be >= 3"),
    ({"input": "JSON file", "path": "/no/such.json"}, "is neither 'random', 'zero' nor a file"),
])
async def test_invalid_input_is_refused_in_place_and_nothing_runs(store: EngineStore, change: dict,
                                                                  message: str) -> None:
    view = await tab(store)
    for name, value in change.items():
        getattr(view.form, name).value = value
    assert view.start() is None
    assert view.error.visible and message in view.error.object, view.error.object
    assert not view.running and view.tuner is None and view.outcome.result is None


async def test_engine_errors_are_shown_in_words(server: Server, store: EngineStore) -> None:
    view = await tab(store)
    await server.unload_model("digits_mlp")
    await run(view, store)
    text = view.error.object
    assert view.error.visible and "digits_mlp" in text
    first_word = text.split()[0].rstrip(":")
    assert not first_word.startswith(("Model", "Invalid", "Runtime", "Perf")) and "Error" not in text, text
    assert "Traceback" not in text and view.status.object.startswith("failed")
    assert view.outcome.apply_button.disabled and not view.running


async def test_the_model_list_offers_only_models_it_can_measure_and_says_why(
        server: Server, store: EngineStore, with_accumulator: Path) -> None:
    await server.load_model("accumulator")  # READY, but a sequence model
    await server.unload_model("digits_mlp")
    view = TuningView(store)
    await view.refresh_models()
    assert view.form.model.options == ["add_sub"] and view.form.model.value == "add_sub"
    assert view.reasons == {"accumulator": "a sequence model (the load generator sends no sequences)",
                            "digits_mlp": "not loaded (load it in the Models tab)"}
    assert "**accumulator**: a sequence model" in view.not_offered.object
    await server.unload_model("add_sub")
    await view.refresh_models()
    assert view.form.model.options == [] and view.run_button.disabled
