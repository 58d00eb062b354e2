"""The Config tab against the real engine: live validation with line numbers, form controls
rewriting the text, the diff against disk, Apply (atomic write + backup + hot reload), Revert
(once), one editor per model opened, the unsaved-edits prompt, stale writes refused, knobs
that do not apply disabled with the reason. (What only a browser shows, the undo history and
the clicks, is in tests/browser/test_config_editor_browser.py.)"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from workbench import Server
from workbench.ui.config import config_view
from workbench.ui.config.config_view import ConfigView
from workbench.ui.shared.store import EngineStore


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
    assert view.status.object == f"restored {path} from {path}.bak; reloaded"
    assert view.revert_button.disabled and view.revert_button.description == config_view.NO_BACKUP
    view.revert_button.clicks += 1  # a click that gets through anyway restores nothing
    await store.settle()
    assert path.read_text() == original and "no config backup" in view.error.object


async def test_revert_is_disabled_until_there_is_a_backup(store: EngineStore) -> None:
    view = await opened(store)
    assert view.revert_button.disabled and not view.backup_exists
    view.apply_button.clicks += 1
    await store.settle()
    assert not view.revert_button.disabled


async def test_another_model_opens_in_an_editor_of_its_own(store: EngineStore, repository: Path) -> None:
    """The browser's undo history belongs to the editor: a new one per model, so Ctrl+Z
    cannot bring back another model's text (issue 30); a late change from the old editor
    is ignored."""
    view = await opened(store)
    first = view.editor
    view.model.value = "digits_mlp"
    await store.settle()
    assert view.editor is not first and view.editor_box.objects == [view.editor, view.line_count]
    assert view.editor.value == (repository / "digits_mlp" / "config.pbtxt").read_text()
    first.value = first.value.replace("max_batch_size: 8", "max_batch_size: 2")  # a late echo
    await store.settle()
    assert view.diff.object == "*No changes.*" and view.model_name == "digits_mlp"
    same = view.editor
    await view.open("digits_mlp")  # the same model again (after a revert, a change on disk)
    assert view.editor is same


async def test_switching_with_unsaved_edits_asks_keep_or_discard(store: EngineStore, repository: Path) -> None:
    """A's edit was dropped silently when B was chosen (issue 30): now the tab asks."""
    view = await opened(store)
    edited = view.disk_text.replace("max_batch_size: 8", "max_batch_size: 4")
    view.editor.value = edited
    view.model.value = "digits_mlp"
    await store.settle()
    assert view.prompt.visible and view.pending == "digits_mlp"
    assert view.question.object == ("add_sub has unsaved edits. Keep editing add_sub, or discard "
                                    "the edits and open digits_mlp?")
    assert view.editor.value == edited and view.model_name == "add_sub"
    assert view.apply_button.disabled and view.revert_button.disabled  # until answered
    assert store.selection.name == "digits_mlp"
    view.keep_button.clicks += 1
    await store.settle()
    assert not view.prompt.visible and view.model.value == "add_sub" == store.selection.name
    assert view.editor.value == edited and not view.apply_button.disabled

    view.model.value = "digits_mlp"
    await store.settle()
    assert view.switch_button.label == "Discard edits, open digits_mlp"
    view.switch_button.clicks += 1
    await store.settle()
    assert not view.prompt.visible and view.model_name == "digits_mlp"
    assert view.editor.value == (repository / "digits_mlp" / "config.pbtxt").read_text()
    assert "max_batch_size: 8" in (repository / "add_sub" / "config.pbtxt").read_text()


async def test_apply_of_a_stale_text_is_refused_and_the_edits_can_be_kept_on_the_new_file(
        server: Server, store: EngineStore, repository: Path) -> None:
    path = repository / "add_sub" / "config.pbtxt"
    view = await opened(store)
    mine = view.disk_text.replace("max_batch_size: 8", "max_batch_size: 2")
    theirs = view.disk_text.replace("max_batch_size: 8", "max_batch_size: 6")
    view.editor.value = mine
    await server.config_files.write_model_config("add_sub", theirs)  # another tab's Apply
    view.apply_button.clicks += 1
    await store.settle()
    assert path.read_text() == theirs
    assert view.error.visible and "changed since this text was read" in view.error.object
    assert view.keep_new_button.visible and "Apply is refused" in view.status.object
    assert view.editor.value == mine  # nothing lost
    view.keep_new_button.clicks += 1
    await store.settle()
    assert "-max_batch_size: 6\n+max_batch_size: 2" in view.diff.object
    view.apply_button.clicks += 1
    await store.settle()
    assert path.read_text() == mine and view.status.object.endswith("; reloaded")


async def test_an_apply_whose_reload_fails_leaves_the_file_and_keeps_the_edits(
        server: Server, store: EngineStore, repository: Path) -> None:
    """A text that validates but does not load stayed in the file, and the tab took it as the
    file's text (new-user trial of issue 30): the file that served is back, the banner says
    so, and the text stays in the editor as edits against that file."""
    path = repository / "add_sub" / "config.pbtxt"
    original = path.read_text()
    view = await opened(store)
    mine = original + 'parameters { key: "intra_op_thread_count" value { string_value: "abc" } }\n'
    view.editor.value = mine
    await store.settle()
    assert view.problems == [] and not view.apply_button.disabled
    view.apply_button.clicks += 1
    await store.settle()
    assert path.read_text() == original and not path.with_name("config.pbtxt.bak").exists()
    assert view.status.alert_type == "danger"
    assert view.status.object.startswith(f"{path} is unchanged: the reload failed, so the file that "
                                         "served before was put back (your text stays in the editor)")
    assert view.editor.value == mine and view.has_edits() and view.disk_text == original
    assert '+parameters { key: "intra_op_thread_count"' in view.diff.object
    assert view.revert_button.disabled  # nothing to revert: the file is as it was


async def test_an_apply_that_takes_ensembles_out_of_service_says_which(
        server: Server, store: EngineStore, repository: Path) -> None:
    """The banner said only "reloaded" while an ensemble calling the model became UNAVAILABLE
    (new-user trial: digits_mlp's max_batch_size below digits_jpeg's)."""
    chain = ('name: "chain"\nplatform: "ensemble"\nmax_batch_size: 8\n'
             'input [ { name: "A" data_type: TYPE_FP32 dims: [ 16 ] }, '
             '{ name: "B" data_type: TYPE_FP32 dims: [ 16 ] } ]\n'
             'output [ { name: "S" data_type: TYPE_FP32 dims: [ 16 ] } ]\n'
             'ensemble_scheduling { step [ { model_name: "add_sub" model_version: -1 '
             'input_map { key: "INPUT0" value: "A" } input_map { key: "INPUT1" value: "B" } '
             'output_map { key: "OUTPUT0" value: "S" } } ] }\n')
    (repository / "chain" / "1").mkdir(parents=True)
    (repository / "chain" / "config.pbtxt").write_text(chain)
    await server.load_model("chain")
    view = await opened(store)
    view.editor.value = view.disk_text.replace("max_batch_size: 8", "max_batch_size: 4")
    await store.settle()
    view.apply_button.clicks += 1
    await store.settle()
    assert view.status.alert_type == "warning"
    assert "; reloaded; but ensemble 'chain' is unavailable: " in view.status.object
    assert "add_sub which only allows maximum batch size to be 4" in view.status.object


async def test_knobs_that_do_not_apply_are_disabled_with_the_reason(
        with_accumulator: Path, store: EngineStore) -> None:
    """The queue-delay knob of the sequence-batched accumulator inserted `dynamic_batching {}`
    beside `sequence_batching` (issue 30)."""
    view = await opened(store, "accumulator")
    form = view.form
    assert form.delay.disabled and "direct strategy" in str(form.delay.description)
    assert form.dynamic_batching.disabled and form.preferred.disabled and form.cache.disabled
    assert not form.max_batch_size.disabled and not form.count.disabled
    assert form.not_applicable.visible and "sequence-batched model" in form.not_applicable.object
    form.count.value = 2  # a knob that applies still rewrites its value only
    assert "count: 2 kind: KIND_CPU" in view.editor.value and "dynamic_batching" not in view.editor.value
    view.model.value = "add_sub"
    await store.settle()
    assert view.prompt.visible
    view.switch_button.clicks += 1
    await store.settle()
    assert not form.delay.disabled and "sequence-batched" not in form.not_applicable.object


async def test_backend_thread_knobs_rewrite_the_parameters_or_say_why_not(
        repository: Path, sample_repository: Path, store: EngineStore) -> None:
    """digits_mlp (onnxruntime) has intra- and inter-op threads but no streams; postprocessor
    (python) has none of them, each disabled with the reason."""
    shutil.copytree(sample_repository / "postprocessor", repository / "postprocessor")
    view = await opened(store, "digits_mlp")
    form = view.form
    assert (form.intra_op.value, form.inter_op.value, form.streams.value) == (1, 0, 0)
    assert not form.intra_op.disabled and not form.inter_op.disabled
    assert form.streams.disabled and "openvino models only" in str(form.streams.description)
    text = view.editor.value
    form.intra_op.value = 2
    assert view.editor.value == text.replace('"intra_op_thread_count" value: { string_value: "1" }',
                                             '"intra_op_thread_count" value: { string_value: "2" }')
    form.inter_op.value = 1
    assert view.editor.value.endswith(
        'parameters { key: "inter_op_thread_count" value: { string_value: "1" } }\n')
    form = (await opened(store, "postprocessor")).form
    assert form.intra_op.disabled and form.inter_op.disabled and form.streams.disabled
    assert "the python backend has no intra-op threads parameter" in form.not_applicable.object


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


async def test_the_line_under_the_editor_counts_lines_and_says_a_long_file_goes_on(
        store: EngineStore) -> None:
    """A file longer than the text area says so under the editor (a new user took the lines
    in view for the whole file); a short one gets its line count alone."""
    view = await opened(store)
    lines = len(view.editor.value.splitlines())
    assert lines < config_view.ROWS_SHOWN and view.line_count.object == f"{lines} lines"
    view.editor.value += "".join(f"# note {n}\n" for n in range(config_view.ROWS_SHOWN))
    await store.settle()
    assert view.line_count.object == (f"{lines + config_view.ROWS_SHOWN} lines: {config_view.ROWS_SHOWN} "
                                      "in view, scroll the editor for the rest")
    view.model.value = "digits_mlp"  # another model's editor: its own count
    await store.settle()
    assert view.line_count.object.startswith(f"{len(view.editor.value.splitlines())} lines")
    assert view.line_count in view.editor_box.objects
