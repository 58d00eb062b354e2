"""The Config tab's editor in Chromium, typed into and clicked as a person does, in both hosts
the tab lives in: the Jupyter-hosted dashboard (``{base_url}/workbench/``) and the inline
notebook dashboard (a kernel's engine, in JupyterLab). Each check reads what the page shows
(the editor's own text, the banners, the buttons' state) and what the files on disk hold.

* undo after a model switch: Ctrl+Z in the editor never brings back another model's text
  (it did: the editor held add_sub's text while digits_mlp was selected, and Apply could
  write it into digits_mlp's file);
* the unsaved-edits prompt: choosing another model with edits asks to keep or discard them
  (they were dropped silently);
* a stale write refused: Apply of a text read before another tab applied (or the file was
  written on disk) is refused and the file keeps the other change (it was written over);
* revert once: Revert restores the backup once, says which file came from which, and is
  disabled after (it was a toggle: a second click re-applied the edit);
* an Apply whose reload fails leaves the file as it served (the new text stayed in the file,
  where it would stop the next start) and keeps the text in the editor (new-user trial).

Issue 30; the engine's side is in tests/engine/test_config_files.py, the view's in
tests/ui/test_ui_config_editor.py.
"""

from __future__ import annotations

import importlib.util
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.browser.browser_support import (
    BASE_URL,
    ENABLE_FILE,
    PATIENCE_S,
    eventually,
    run_all_cells_until,
    serving,
    write_dashboard_notebook,
)
from tests.browser.test_dashboard_browser import open_dashboard
from workbench.testing.lab import LAB_TEST_FLAGS
from workbench.testing.process import JupyterProcess
from workbench.testing.reload import add_sub_config

WAIT_MS = PATIENCE_S * 1000
#: the Apply button's label
APPLY = "Apply (write + reload)"
#: add_sub's file as the conftest's repository writes it (2 CPU instances)
ADD_SUB = add_sub_config("add_sub", 8, 2)


# ----------------------------------------------------------------- what a person does
def config_tab(scope) -> None:
    scope.locator(".bk-tab", has_text="Config").first.click()
    scope.get_by_role("button", name=APPLY).wait_for(timeout=WAIT_MS)


def model_select(scope):
    return scope.get_by_label("Model", exact=True).filter(visible=True).first


def editor(scope):
    return scope.locator(".ace_editor").filter(visible=True).first


def editor_text(scope) -> str:
    """The text the browser's editor holds (Ace's own value: what the person sees)."""
    return editor(scope).evaluate("e => e.env.editor.getValue()")


def shows_model(scope, name: str) -> None:
    """Wait until the editor holds ``name``'s config."""
    eventually(lambda: f'name: "{name}"' in editor_text(scope), f"{name}'s config in the editor")


def choose(scope, name: str) -> None:
    model_select(scope).select_option(name)


def retype_line(page, scope, old: str, new: str) -> None:
    """Click the editor's line holding ``old`` and type ``new`` over it, as a person does."""
    # at the line's place: Ace's content layer over the lines takes the click, as a person's
    editor(scope).locator(".ace_line", has_text=old).first.click(force=True)
    page.keyboard.press("End")
    page.keyboard.press("Shift+Home")
    page.keyboard.type(new)


def edit_batch_size(page, scope, old: int, new: int) -> None:
    """max_batch_size ``old`` -> ``new`` in the editor; waits until the tab's diff shows it
    (the edit reached the dashboard)."""
    retype_line(page, scope, f"max_batch_size: {old}", f"max_batch_size: {new}")
    scope.get_by_text(f"+max_batch_size: {new}").first.wait_for(timeout=WAIT_MS)


def undo_keeps(page, scope, text: str, times: int = 3) -> None:
    """Ctrl+Z ``times`` times in the editor; after each the editor still holds ``text``."""
    editor(scope).locator(".ace_content").click()
    for press in range(1, times + 1):
        page.keyboard.press("Control+z")
        shown = editor_text(scope)
        assert shown == text, f"Ctrl+Z number {press} brought another text into the editor:\n{shown}"


def apply(scope) -> None:
    scope.get_by_role("button", name=APPLY).click()


def banner(scope, text: str) -> None:
    scope.get_by_text(text).first.wait_for(timeout=WAIT_MS)


def reset(models: Path, sample_repository: Path) -> None:
    """add_sub's and digits_mlp's files as the repository had them, without backups."""
    (models / "add_sub" / "config.pbtxt").write_text(ADD_SUB)
    shutil.copy(sample_repository / "digits_mlp" / "config.pbtxt", models / "digits_mlp" / "config.pbtxt")
    for model in ("add_sub", "digits_mlp"):
        (models / model / "config.pbtxt.bak").unlink(missing_ok=True)


def open_fresh(scope, name: str, other: str) -> None:
    """Open ``name`` in the Config tab afresh (through ``other``: the file is read again),
    answering a leftover prompt by discarding."""
    for model in (other, name):
        choose(scope, model)
        switch = scope.get_by_role("button", name=f"Discard edits, open {model}")

        def opened(model: str = model, switch=switch) -> bool:
            if switch.is_visible():
                switch.click()
            return f'name: "{model}"' in editor_text(scope)

        eventually(opened, f"{model} opened")


# ----------------------------------------------------------------- the four checks
def undo_after_a_switch_keeps_the_other_models_text(page, scope, models: Path) -> None:
    digits = (models / "digits_mlp" / "config.pbtxt").read_text()
    edit_batch_size(page, scope, 8, 4)
    apply(scope)
    eventually(lambda: "max_batch_size: 4" in (models / "add_sub" / "config.pbtxt").read_text(),
               "add_sub's edit written")
    choose(scope, "digits_mlp")
    shows_model(scope, "digits_mlp")
    undo_keeps(page, scope, digits)
    assert (models / "digits_mlp" / "config.pbtxt").read_text() == digits


def a_switch_with_unsaved_edits_asks_keep_or_discard(page, scope, models: Path) -> None:
    from playwright.sync_api import expect

    add_sub = (models / "add_sub" / "config.pbtxt").read_text()
    digits = (models / "digits_mlp" / "config.pbtxt").read_text()
    edit_batch_size(page, scope, 8, 2)
    edited = editor_text(scope)
    choose(scope, "digits_mlp")
    banner(scope, "add_sub has unsaved edits. Keep editing add_sub, or discard the edits and open digits_mlp?")
    assert editor_text(scope) == edited  # nothing dropped while it asks
    expect(scope.get_by_role("button", name=APPLY)).to_be_disabled()
    scope.get_by_role("button", name="Keep editing add_sub").click()
    expect(model_select(scope)).to_have_value("add_sub", timeout=WAIT_MS)
    expect(scope.get_by_text("has unsaved edits")).to_be_hidden(timeout=WAIT_MS)
    assert editor_text(scope) == edited

    choose(scope, "digits_mlp")
    scope.get_by_role("button", name="Discard edits, open digits_mlp").click()
    shows_model(scope, "digits_mlp")
    assert editor_text(scope) == digits
    undo_keeps(page, scope, digits)  # the discarded edits are not in its undo history either
    assert (models / "add_sub" / "config.pbtxt").read_text() == add_sub  # nothing written


def a_stale_apply_is_refused(page, scope, models: Path, write_elsewhere) -> None:
    """``write_elsewhere()`` changes add_sub's file after this page read it (another tab's
    Apply, an editor) and returns the text it wrote."""
    edit_batch_size(page, scope, 8, 2)
    mine = editor_text(scope)
    theirs = write_elsewhere()
    apply(scope)
    banner(scope, "changed since this text was read from it")
    assert (models / "add_sub" / "config.pbtxt").read_text() == theirs
    assert editor_text(scope) == mine  # the edits are still there


def revert_restores_the_backup_once(page, scope, models: Path) -> None:
    from playwright.sync_api import expect

    path = models / "add_sub" / "config.pbtxt"
    original = path.read_text()
    revert = scope.get_by_role("button", name="Revert to backup")
    expect(revert).to_be_disabled()  # nothing to revert to yet
    edit_batch_size(page, scope, 8, 4)
    apply(scope)
    eventually(lambda: "max_batch_size: 4" in path.read_text(), "the edit written")
    expect(revert).to_be_enabled(timeout=WAIT_MS)
    revert.click()
    banner(scope, f"restored {path} from {path}.bak")
    assert path.read_text() == original
    expect(revert).to_be_disabled(timeout=WAIT_MS)  # once: the backup is used up
    assert path.read_text() == original and not path.with_name("config.pbtxt.bak").exists()


def a_failed_reload_leaves_the_file(page, scope, models: Path) -> None:
    """The model's file was replaced by a broken export: an Apply reloads and fails."""
    from playwright.sync_api import expect

    path, model_file = models / "add_sub" / "config.pbtxt", models / "add_sub" / "1" / "model.onnx"
    original, onnx = path.read_text(), model_file.read_bytes()
    model_file.write_bytes(b"not an onnx model")
    try:
        edit_batch_size(page, scope, 8, 4)
        mine = editor_text(scope)
        apply(scope)
        banner(scope, f"{path} is unchanged: the reload failed, so the file that served before was put back")
        assert path.read_text() == original and not path.with_name("config.pbtxt.bak").exists()
        assert editor_text(scope) == mine  # the text stays, as edits against the file
        scope.get_by_text("+max_batch_size: 4").first.wait_for(timeout=WAIT_MS)
        expect(scope.get_by_role("button", name="Revert to backup")).to_be_disabled()
    finally:
        model_file.write_bytes(onnx)


# ----------------------------------------------------------------- the Jupyter-hosted dashboard
@pytest.fixture
def hosted(browser, dashboard, models: Path, sample_repository: Path) -> Iterator[Any]:
    """A new tab on the Jupyter-hosted dashboard, on the Config tab with add_sub open (the
    page is the scope of its locators)."""
    reset(models, sample_repository)
    page = open_dashboard(browser, dashboard)
    config_tab(page)
    choose(page, "add_sub")
    shows_model(page, "add_sub")
    yield page
    page.close()


def test_undo_after_a_model_switch_in_the_jupyter_dashboard(hosted, models: Path) -> None:
    undo_after_a_switch_keeps_the_other_models_text(hosted, hosted, models)


def test_the_unsaved_edits_prompt_in_the_jupyter_dashboard(hosted, models: Path) -> None:
    a_switch_with_unsaved_edits_asks_keep_or_discard(hosted, hosted, models)


def test_apply_after_another_tab_applied_is_refused_in_the_jupyter_dashboard(
        hosted, browser, dashboard, models: Path) -> None:
    def another_tab_applies() -> str:
        other = open_dashboard(browser, dashboard)
        config_tab(other)
        choose(other, "add_sub")
        shows_model(other, "add_sub")
        edit_batch_size(other, other, 8, 6)
        text = editor_text(other)
        apply(other)
        banner(other, "; reloaded")
        other.close()
        return text

    a_stale_apply_is_refused(hosted, hosted, models, another_tab_applies)


def test_revert_once_in_the_jupyter_dashboard(hosted, models: Path) -> None:
    revert_restores_the_backup_once(hosted, hosted, models)


def test_a_failed_reload_leaves_the_file_in_the_jupyter_dashboard(hosted, models: Path) -> None:
    a_failed_reload_leaves_the_file(hosted, hosted, models)


# ----------------------------------------------------------------- the inline notebook dashboard
@pytest.fixture(scope="module")
def notebook_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """`jupyter lab` for a notebook whose kernel runs the engine and the inline dashboard
    (the workbench server extension off: the kernel's engine is the one under test)."""
    if importlib.util.find_spec("jupyterlab") is None:
        pytest.skip("jupyterlab is not installed (the `dev` extra has it)")
    jupyter = JupyterProcess([f"--ServerApp.base_url={BASE_URL}", *LAB_TEST_FLAGS,
                              "--ServerApp.jpserver_extensions=workbench.jupyter=False"],
                             home=tmp_path_factory.mktemp("lab-home"), enable_file=ENABLE_FILE,
                             lab=True, engine=False)
    with serving(jupyter) as served:
        yield served


@pytest.fixture(scope="module")
def inline_page(browser, notebook_lab, models: Path, tmp_path_factory: pytest.TempPathFactory):
    """The notebook's page, its inline dashboard on the Config tab; the kernel shut after."""
    write_dashboard_notebook(Path(notebook_lab.jupyter.root_dir) / "config_inline.ipynb", models,
                             "model_control_mode='explicit', load_model=['*']")
    page = browser.new_page(viewport={"width": 1400, "height": 1400})
    page.goto(f"{notebook_lab.root}lab/tree/config_inline.ipynb?token={notebook_lab.jupyter.token}")
    output = page.locator(".jp-OutputArea")
    run_all_cells_until(page, lambda: output.locator(".bk-tab", has_text="Config").first.is_visible(),
                        "the inline dashboard's tabs")
    config_tab(output)
    yield page, output
    page.close()
    with httpx.Client(base_url=notebook_lab.root, headers=notebook_lab.jupyter.headers, timeout=60) as jupyter:
        for session in jupyter.get("api/sessions").json():
            jupyter.delete(f"api/sessions/{session['id']}").raise_for_status()


@pytest.fixture
def inline(inline_page, models: Path, sample_repository: Path) -> tuple[Any, Any]:
    """The inline dashboard's Config tab with add_sub open afresh, its files as at first."""
    page, output = inline_page
    reset(models, sample_repository)
    open_fresh(output, "add_sub", "digits_mlp")
    return page, output


def test_undo_after_a_model_switch_in_the_inline_dashboard(inline, models: Path) -> None:
    undo_after_a_switch_keeps_the_other_models_text(inline[0], inline[1], models)


def test_the_unsaved_edits_prompt_in_the_inline_dashboard(inline, models: Path) -> None:
    a_switch_with_unsaved_edits_asks_keep_or_discard(inline[0], inline[1], models)


def test_apply_after_the_file_changed_on_disk_is_refused_in_the_inline_dashboard(
        inline, models: Path) -> None:
    def an_editor_saves() -> str:
        text = ADD_SUB.replace("max_batch_size: 8", "max_batch_size: 6")
        (models / "add_sub" / "config.pbtxt").write_text(text)
        return text

    a_stale_apply_is_refused(inline[0], inline[1], models, an_editor_saves)


def test_revert_once_in_the_inline_dashboard(inline, models: Path) -> None:
    revert_restores_the_backup_once(inline[0], inline[1], models)


def test_a_failed_reload_leaves_the_file_in_the_inline_dashboard(inline, models: Path) -> None:
    a_failed_reload_leaves_the_file(inline[0], inline[1], models)
