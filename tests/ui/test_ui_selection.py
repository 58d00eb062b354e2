"""One model selection across a session's tabs: a person's choice in any dropdown moves the
others that offer the model; a dropdown that does not offer it keeps its own choice; a
forced change (the chosen model left the list) is not a choice. Real Panel Selects, and the
dashboard's tabs on the real engine."""

from __future__ import annotations

import panel as pn

from workbench import Server
from workbench.ui.app import Dashboard
from workbench.ui.shared.selection import ModelSelection, model_of_version_key, version_of_version_key


def dropdowns(selection: ModelSelection):
    models = pn.widgets.Select(options=["accumulator", "add_sub", "digits_mlp"])
    sweepable = pn.widgets.Select(options=["add_sub", "digits_mlp"])  # a tab offering fewer
    versions = pn.widgets.Select(options=["add_sub/1", "digits_mlp/1", "digits_mlp/2"])
    selection.bind(models)
    selection.bind(sweepable)
    selection.bind(versions, name_of=model_of_version_key, version_of=version_of_version_key)
    return models, sweepable, versions


def test_a_choice_in_one_dropdown_moves_the_others_that_offer_it() -> None:
    selection = ModelSelection()
    models, sweepable, versions = dropdowns(selection)
    models.value = "digits_mlp"
    assert (selection.name, sweepable.value, versions.value) == ("digits_mlp", "digits_mlp",
                                                                 "digits_mlp/2")  # latest
    versions.value = "digits_mlp/1"  # a version chosen: the model dropdowns stay on the model
    assert (selection.name, selection.version) == ("digits_mlp", "1")
    assert models.value == sweepable.value == "digits_mlp"
    sweepable.value = "add_sub"
    assert (models.value, versions.value) == ("add_sub", "add_sub/1")


def test_a_dropdown_that_does_not_offer_the_model_keeps_its_own() -> None:
    selection = ModelSelection()
    models, sweepable, versions = dropdowns(selection)
    sweepable.value = "digits_mlp"
    models.value = "accumulator"  # not sweepable, no live version
    assert selection.name == "accumulator"
    assert (sweepable.value, versions.value) == ("digits_mlp", "digits_mlp/2")
    sweepable.options = ["add_sub", "digits_mlp", "accumulator"]  # offered now: it follows
    assert sweepable.value == "accumulator"


def test_options_changing_under_a_dropdown_do_not_move_the_selection() -> None:
    selection = ModelSelection()
    models, _sweepable, versions = dropdowns(selection)
    models.value = "add_sub"
    versions.options = ["digits_mlp/1", "digits_mlp/2"]  # add_sub unloaded: the tab moves on
    versions.value = "digits_mlp/1"  # (as the Live tab's beat does)
    assert selection.name == "add_sub"
    assert models.value == "add_sub"
    versions.options = ["add_sub/1", "digits_mlp/1", "digits_mlp/2"]  # loaded again
    assert versions.value == "add_sub/1"


async def test_the_dashboards_tabs_open_on_the_model_selected_in_models(server: Server) -> None:
    board = Dashboard(server, tuning=None)
    try:
        await board.models.refresh()
        await board.config.refresh_models()
        board.live.tick()
        await board.store.settle()
        assert board.store.selection.name == "add_sub"  # the first READY model
        board.models.model.value = "digits_mlp"
        await board.store.settle()
        assert board.config.model_name == "digits_mlp"  # the editor opened it
        assert board.live.model.value == "digits_mlp/2"
        board.live.tick()  # the next beat keeps it
        assert board.live.model.value == "digits_mlp/2"
        board.config.model.value = "add_sub"  # chosen in Config: Models follows
        await board.store.settle()
        assert board.models.model.value == "add_sub" and board.live.model.value == "add_sub/1"
    finally:
        board.close()
