"""The Config tab against the real engine: live validation with line numbers, form controls
rewriting the text, the diff against disk, Apply (atomic write + backup + hot reload), Revert."""

from __future__ import annotations

from pathlib import Path

import pytest

from workbench import Server
from workbench.ui import config_view
from workbench.ui.config_view import ConfigView
from workbench.ui.store import EngineStore


@pytest.fixture(autouse=True)
def quick_debounce(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(config_view, "DEBOUNCE_S", 0.05)


async def opened(store: EngineStore, name: str = "add_sub") -> ConfigView:
    view = ConfigView(store)
    await view.refresh_models()
    view.model.value = name
    await store.settle()
    return view


def line_of(text: str, needle: str) -> int:
    return next(n for n, line in enumerate(text.splitlines(), 1) if needle in line)


async def test_opening_a_model_shows_its_file_valid_and_unchanged(store: EngineStore,
                                                                   repository: Path) -> None:
    view = await opened(store)
    assert view.model.options == ["add_sub", "digits_mlp"]
    assert view.editor.value == (repository / "add_sub" / "config.pbtxt").read_text()
    assert view.problems == [] and view.problem_list.object == "✓ valid"
    assert view.diff.object == "*No changes.*"
    assert (view.form.max_batch_size.value, view.form.count.value) == (8, 1)
    assert view.form.dynamic_batching.value and view.form.kind.value == "KIND_CPU"


async def test_syntax_and_semantic_errors_become_annotations_on_their_lines(store: EngineStore) -> None:
    view = await opened(store)
    good = view.editor.value
    view.editor.value = good.replace("max_batch_size: 8", "max_batch_size: 8\nfoo: 1")
    await store.settle()
    line = line_of(view.editor.value, "foo: 1")
    assert view.editor.annotations == [{
        "row": line - 1, "column": 0, "type": "error",
        "text": 'Message type "inference.ModelConfig" has no field named "foo".'}]
    assert view.problem_list.object.startswith(f"- line {line}, column 1 (syntax):")
    view.editor.value = good.replace("max_batch_size: 8", "max_batch_size: -3")
    await store.settle()
    [annotation] = view.editor.annotations
    assert annotation["row"] == line_of(good, "max_batch_size") - 1
    assert "must be non-negative" in annotation["text"]
    assert "(semantic)" in view.problem_list.object
    view.editor.value = good
    await store.settle()
    assert view.editor.annotations == [] and view.problems == []


async def test_validation_is_debounced(store: EngineStore) -> None:
    view = await opened(store)
    good = view.editor.value
    view.editor.value = good.replace("max_batch_size: 8", "max_batch_size: -1")
    first = view._validation
    assert first is not None
    view.editor.value = good.replace("max_batch_size: 8", "max_batch_size: 4")
    await store.settle()
    assert first.cancelled()  # the quick second edit replaced the first validation
    assert view.problems == []


async def test_form_rewrites_the_text_and_apply_writes_backup_and_reloads(
        server: Server, store: EngineStore, repository: Path) -> None:
    path = repository / "add_sub" / "config.pbtxt"
    original = path.read_text()
    view = await opened(store)
    view.form.max_batch_size.value = 16
    view.form.delay.value = 200
    assert "max_batch_size: 16" in view.editor.value
    assert "-max_batch_size: 8\n+max_batch_size: 16" in view.diff.object
    assert "+  max_queue_delay_microseconds: 200" in view.diff.object
    await store.settle()
    assert view.problems == []
    view.apply_button.clicks += 1
    await store.settle()
    assert path.read_text() == view.editor.value
    assert (repository / "add_sub" / "config.pbtxt.bak").read_text() == original
    config = await server.model_config("add_sub")
    assert config.max_batch_size == 16
    assert config.dynamic_batching.max_queue_delay_microseconds == 200
    assert view.status.visible and view.status.object.endswith("; reloaded")
    assert view.diff.object == "*No changes.*" and not view.revert_button.disabled

    view.revert_button.clicks += 1
    await store.settle()
    assert path.read_text() == original == view.editor.value
    assert (await server.model_config("add_sub")).max_batch_size == 8
    assert view.status.object.startswith("reverted to the backup")


async def test_apply_of_an_invalid_text_shows_the_error_and_writes_nothing(
        server: Server, store: EngineStore, repository: Path) -> None:
    path = repository / "add_sub" / "config.pbtxt"
    original = path.read_text()
    view = await opened(store)
    view.editor.value = original.replace("max_batch_size: 8", "max_batch_size: -3")
    view.apply_button.clicks += 1
    await store.settle()
    assert view.error.visible and not view.status.visible
    assert view.error.object.startswith("model config for 'add_sub' is not valid")  # no exception name
    assert "Traceback" not in view.error.object
    assert path.read_text() == original and not path.with_name("config.pbtxt.bak").exists()
    assert (await server.model_config("add_sub")).max_batch_size == 8


async def test_the_form_refuses_while_the_text_does_not_parse(store: EngineStore) -> None:
    view = await opened(store)
    broken = view.editor.value + "\ninstance_group [ {"
    view.editor.value = broken
    view.form.max_batch_size.value = 4
    assert view.editor.value == broken
    assert view.error.visible and "fix the syntax error" in view.error.object
    view.discard_button.clicks += 1
    assert view.editor.value == view.disk_text


async def test_an_edit_clears_the_last_banner_and_invalid_text_disables_apply(
        store: EngineStore) -> None:
    view = await opened(store)
    good = view.editor.value
    view.apply_button.clicks += 1
    await store.settle()
    assert view.status.visible and view.status.object.endswith("; reloaded")
    view.editor.value = good.replace("max_batch_size: 8", "max_batch_size: -3")
    await store.settle()
    assert not view.status.visible  # no green "written; reloaded" beside the problem
    assert view.problems and view.apply_button.disabled
    assert view.apply_button.description == config_view.FIX_FIRST
    view.editor.value = good
    await store.settle()
    assert not view.apply_button.disabled and view.apply_button.description is None


async def test_the_form_shows_what_the_model_is_served_with(store: EngineStore) -> None:
    view = await opened(store, "digits_mlp")  # dynamic_batching { } without preferred sizes
    assert view.form.preferred.value == ""
    assert view.form.preferred.placeholder == "empty: served as 64"  # Triton's completion
    assert "preferred batch sizes 64" in view.served.object
    assert "max_batch_size 64" in view.served.object


async def test_a_file_written_elsewhere_is_followed_unless_the_editor_holds_edits(
        server: Server, store: EngineStore, repository: Path) -> None:
    view = await opened(store)
    changed = view.disk_text.replace("max_batch_size: 8", "max_batch_size: 4")
    await server.config_files.write_model_config("add_sub", changed)  # as Tuning's Apply best does
    view.tick()
    await store.settle()
    assert view.editor.value == changed == view.disk_text
    assert view.form.max_batch_size.value == 4 and "changed on disk" in view.status.object
    view.editor.value = changed.replace("max_batch_size: 4", "max_batch_size: 2")  # an edit
    again = changed.replace("max_batch_size: 4", "max_batch_size: 6")
    await server.config_files.write_model_config("add_sub", again)
    view.tick()
    await store.settle()
    assert "max_batch_size: 2" in view.editor.value  # the edit is kept
    assert view.status.alert_type == "warning" and "since it was opened" in view.status.object
