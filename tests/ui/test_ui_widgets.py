"""ipywidgets controls: the same engine calls through widget value changes."""

from __future__ import annotations

from pathlib import Path

from tests.ui.ui_helpers import index_states
from workbench import Server
from workbench.ui.widgets import ModelControls


async def controls_on(server: Server, name: str) -> ModelControls:
    controls = ModelControls(server)
    await controls.refresh()
    controls.model.value = (name, "1")
    await controls.settle()
    return controls


async def test_dropdown_lists_model_versions_and_sliders_show_the_config(server: Server) -> None:
    controls = await controls_on(server, "add_sub")
    labels = [label for label, _ in controls.model.options]
    assert labels == ["add_sub / 1 (READY)", "digits_mlp / 1 (READY)", "digits_mlp / 2 (READY)"]
    assert controls.max_queue_delay.value == 0 and controls.preferred_batch_size.max == 8


async def test_slider_changes_reload_the_model_with_the_new_batcher_settings(
        server: Server, repository: Path) -> None:
    before = (repository / "add_sub" / "config.pbtxt").read_text()
    controls = await controls_on(server, "add_sub")
    controls.max_queue_delay.value = 500
    await controls.settle()
    batcher = (await server.model_config("add_sub")).dynamic_batching
    assert batcher.max_queue_delay_microseconds == 500
    controls.preferred_batch_size.value = 4
    await controls.settle()
    batcher = (await server.model_config("add_sub")).dynamic_batching
    assert list(batcher.preferred_batch_size) == [4] and batcher.max_queue_delay_microseconds == 500
    assert "reloaded" in controls.status.value
    assert (repository / "add_sub" / "config.pbtxt").read_text() == before  # tried, not written


async def test_apply_is_a_plain_coroutine_for_tuning_loops(server: Server) -> None:
    controls = await controls_on(server, "digits_mlp")
    for delay_us in (0, 100, 300):
        loaded = await controls.apply(max_queue_delay_us=delay_us)
        assert (await server.model_config("digits_mlp")).dynamic_batching \
            .max_queue_delay_microseconds == delay_us
    assert loaded is not None and loaded["version_policy"] == {"latest": {"num_versions": 2}}  # the rest kept


async def test_buttons_unload_and_load(server: Server) -> None:
    controls = await controls_on(server, "add_sub")
    controls.unload_button.click()
    await controls.settle()
    assert await index_states(server, "add_sub") == {"1": ("UNAVAILABLE", "unloaded")}
    assert "add_sub / 1 (UNAVAILABLE)" in [label for label, _ in controls.model.options]
    controls.load_button.click()
    await controls.settle()
    assert await index_states(server, "add_sub") == {"1": ("READY", "")}


async def test_errors_go_to_the_status_line(server: Server) -> None:
    controls = await controls_on(server, "add_sub")
    assert await controls.apply(max_batch_size=-3) is None  # the engine refuses the config
    assert "max_batch_size" in controls.status.value  # the engine's reason, for a person:
    assert "Traceback" not in controls.status.value
    assert "InvalidModelConfig:" not in controls.status.value and "InvalidArgument:" not in controls.status.value
    assert (await server.model_config("add_sub")).max_batch_size == 8  # still serving as before


async def test_the_batcher_sliders_of_a_sequence_batched_model_are_disabled_with_the_reason(
        with_accumulator: Path, server: Server) -> None:
    """A delay tried on the sequence-batched accumulator loaded it with dynamic_batching set,
    which (one of Triton's scheduling_choice) dropped its sequence_batching (issue 30)."""
    await server.load_model("accumulator")
    controls = ModelControls(server)
    await controls.refresh()
    controls.model.value = ("accumulator", "1")
    await controls.settle()
    assert controls.max_queue_delay.disabled and controls.preferred_batch_size.disabled
    assert "direct strategy" in str(controls.max_queue_delay.tooltip)
    assert "not for accumulator" in controls.status.value
    assert await controls.apply(max_queue_delay_us=100) is None
    assert "does not apply to model &#x27;accumulator&#x27;" in controls.status.value
    assert (await server.model_config("accumulator")).HasField("sequence_batching")
    controls.model.value = ("add_sub", "1")
    await controls.settle()
    assert not controls.max_queue_delay.disabled and controls.status.value == ""
