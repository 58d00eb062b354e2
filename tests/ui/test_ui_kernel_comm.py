"""The inline dashboard's browser messages are applied on the engine's loop, also when they
arrive on another thread (JupyterLab ≥ 4.4 sends comm messages to a kernel subshell, which
ipykernel ≥ 7 handles on a thread of its own): a tab clicked in the browser reaches the
dashboard's widgets on the loop every other change runs on."""

from __future__ import annotations

import asyncio
import threading

import pytest

from workbench import Server
from workbench.ui import dashboard
from workbench.ui.shared.kernel_comm import on_loop


def tab_click(tabs_model_id: str, active: int, *echoes: dict) -> dict:
    """The PATCH-DOC message a notebook's browser sends when a tab is clicked (as Panel's
    client comm delivers it, decoded), after the ``echoes`` of the kernel's own changes."""
    click = {"kind": "ModelChanged", "model": {"id": tabs_model_id}, "attr": "active", "new": active}
    return {"header": {"msgid": "tab-click", "msgtype": "PATCH-DOC"}, "metadata": {},
            "content": {"events": [*echoes, click]}, "_buffers": {}}


def plain(values) -> list:
    return [v.item() if hasattr(v, "item") else v for v in values]


async def test_a_tab_clicked_in_the_browser_reaches_the_dashboard_on_the_engines_loop(
        server: Server) -> None:
    board = dashboard(server, interval_s=60)
    try:
        board._repr_mimebundle_()  # rendered as a notebook cell's output
        ((ref, (_comm, client_comm)),) = board.tabs._comms.items()
        tabs_model = board.tabs._models[ref][0]
        seen: list[threading.Thread] = []
        board.tabs.param.watch(lambda _e: seen.append(threading.current_thread()), "active")
        # delivered on a thread of its own, as a kernel subshell does
        await asyncio.to_thread(client_comm._handle_msg, tab_click(tabs_model.id, 1))
        assert board.tabs.active == 1
        assert seen == [threading.current_thread()]  # the engine's loop's thread
        await asyncio.to_thread(client_comm._handle_msg, tab_click(tabs_model.id, 3))
        assert board.tabs.active == 3 and len(seen) == 2 and seen[1] is threading.current_thread()
    finally:
        board.close()


async def test_on_loop_runs_in_call_order_on_the_loop_and_raises_to_the_caller() -> None:
    loop = asyncio.get_running_loop()
    calls: list[tuple[int, threading.Thread]] = []

    def handle(n: int) -> int:
        if n < 0:
            raise ValueError("refused")
        calls.append((n, threading.current_thread()))
        return n * 2

    wrapped = on_loop(handle, loop)
    assert wrapped(1) == 2  # on the loop's thread: at once

    def from_a_thread() -> list[int]:
        return [wrapped(n) for n in (2, 3)]

    assert await asyncio.to_thread(from_a_thread) == [4, 6]
    assert [n for n, _ in calls] == [1, 2, 3]
    assert {thread for _, thread in calls} == {threading.current_thread()}
    with pytest.raises(ValueError, match="refused"):
        await asyncio.to_thread(wrapped, -1)


async def test_echoes_of_the_kernels_changes_are_dropped_and_the_tab_click_kept(server: Server) -> None:
    """The browser's comm manager sends the kernel's own pushes back: a table's data from
    before it grew (Panel's Tabulator took it for an edit and raised ValueError, and the tab
    click after it in the same message was lost), a plot's streamed points (streamed twice),
    a status text (set back)."""
    board = dashboard(server, interval_s=60)
    try:
        await board.store.settle()
        board._repr_mimebundle_()
        ((ref, (_comm, client_comm)),) = board.tabs._comms.items()
        tabs_model = board.tabs._models[ref][0]
        source = board.models.table._models[ref][0].source  # the Models table
        rows = len(board.models.table.value)
        assert rows > 1
        one_row = {column: plain(values[:1]) for column, values in source.data.items()}
        served = board.models.status._models[ref][0] if ref in board.models.status._models else None
        echoes: list[dict] = [{"kind": "ModelChanged", "model": {"id": source.id}, "attr": "data", "new": one_row},
                  {"kind": "ColumnsStreamed", "model": {"id": source.id}, "attr": "data",
                   "data": one_row, "rollover": None}]
        if served is not None:
            echoes.append({"kind": "ModelChanged", "model": {"id": served.id}, "attr": "text",
                           "new": "a stale status"})
        await asyncio.to_thread(client_comm._handle_msg, tab_click(tabs_model.id, 2, *echoes))
        assert board.tabs.active == 2
        assert len(board.models.table.value) == rows and len(source.data["index"]) == rows
        if served is not None:
            assert served.text != "a stale status"
    finally:
        board.close()


class Transport:
    """Where a notebook output's comm sends to (ipykernel's Comm, absent outside a kernel:
    Panel then holds its pushes back); outside a kernel the comm itself sends nothing."""

    def send(self, data=None, metadata=None, buffers=None) -> None:
        pass


def select_pick(model_id: str, value: str) -> dict:
    """The PATCH-DOC a notebook's browser sends when a Select's value changes (a person's
    pick, or Panel's comm manager echoing a value the kernel pushed)."""
    return {"header": {"msgid": "pick", "msgtype": "PATCH-DOC"}, "metadata": {},
            "content": {"events": [{"kind": "ModelChanged", "model": {"id": model_id}, "attr": "value",
                                    "new": value}]}, "_buffers": {}}


async def test_a_stale_echo_of_a_pushed_value_does_not_undo_the_kernels_newer_value(server: Server) -> None:
    """The kernel moves a Select digits_mlp -> add_sub (two pushes); the browser's echo of
    digits_mlp comes back after the second push: it is dropped (it set the Select back, which
    moved the session's selection, refilled the Rollout form and lost the candidate a person
    had just picked: the inline dashboard's lost pick, ~3 runs in 8; this failed before). A
    person's pick is kept, also of a value whose echo already came."""
    board = dashboard(server, interval_s=60)
    try:
        await board.store.settle()
        board._repr_mimebundle_()  # rendered as a notebook cell's output
        ((ref, (comm, client_comm)),) = board.tabs._comms.items()
        comm._comm = Transport()  # the browser's end of the comm: pushes are sent now
        select = board.models.model  # the Models tab's, shown first (bound to the selection, as the Rollout tab's)
        select_model = select._models[ref][0]
        assert select.value == "add_sub" and "digits_mlp" in select.options
        select.value = "digits_mlp"
        select.value = "add_sub"  # the kernel's newer value, pushed after digits_mlp
        # the browser's comm manager echoes both pushes, the first one after the second push
        await asyncio.to_thread(client_comm._handle_msg, select_pick(select_model.id, "digits_mlp"))
        assert select.value == "add_sub"
        await asyncio.to_thread(client_comm._handle_msg, select_pick(select_model.id, "add_sub"))
        await asyncio.to_thread(client_comm._handle_msg, select_pick(select_model.id, "digits_mlp"))  # a person
        assert select.value == "digits_mlp"
        # echoed in order, the kernel's values stay; a person's picks after them are kept
        select.value = "add_sub"
        select.value = "digits_mlp"
        for echo in ("add_sub", "digits_mlp"):
            await asyncio.to_thread(client_comm._handle_msg, select_pick(select_model.id, echo))
            assert select.value == "digits_mlp"
        for pick in ("add_sub", "digits_mlp"):
            await asyncio.to_thread(client_comm._handle_msg, select_pick(select_model.id, pick))
            assert select.value == pick
    finally:
        board.close()


def test_a_push_of_what_the_browser_holds_awaits_no_echo() -> None:
    """The browser echoes only a value it did not hold: a push of the value a person just
    picked is not awaited as an echo, so the person's later pick of it is kept."""
    import json

    from workbench.ui.shared.kernel_comm import PushedValues

    pushed = PushedValues()

    def push(value: str) -> None:
        pushed.record(json.dumps({"events": [
            {"kind": "ModelChanged", "model": {"id": "s"}, "attr": "value", "new": value}]}))

    def from_browser(value: str) -> bool:
        return pushed.is_echo({"kind": "ModelChanged", "model": {"id": "s"}, "attr": "value", "new": value})

    push("none")
    assert from_browser("none")  # the echo
    assert not from_browser("2")  # a person's pick: the browser holds 2
    push("2")  # the kernel pushes 2 too (a fill): no echo comes
    assert not from_browser("none") and not from_browser("2")  # the person's picks, kept


async def test_a_text_typed_just_before_enter_in_another_field_reaches_the_widget() -> None:
    """The browser's comm manager gathers a person's changes while the kernel has not yet
    acknowledged its last message (a busy kernel): a text area's text, left with Tab, and
    the Enter pressed in the next field then arrive in one message. Panel ran the Enter's
    callback while the message was held and, pushing that callback's change, dropped the
    text area's change from the held events before any widget heard of it: the kernel's
    Bokeh model held the typed text, the widget the old one (the inline Tuning form kept the
    filled search space: "112 settings" for the 2 typed; this failed before)."""
    import panel as pn

    from workbench.ui.shared.kernel_comm import apply_on_loop, in_steps

    pn.extension(inline=True)  # as dashboard() does: outputs are rendered with comms
    space = pn.widgets.TextAreaInput(value="instance_count=1,2")
    levels = pn.widgets.TextInput(value="1, 2, 4")
    heard: list[str] = []
    space.param.watch(lambda e: heard.append(e.new), "value")
    form = pn.Column(space, levels)
    apply_on_loop(form, asyncio.get_running_loop())
    form._repr_mimebundle_()  # rendered as a notebook cell's output
    ((ref, (comm, client_comm)),) = form._comms.items()
    comm._comm = Transport()  # the browser's end: pushes are sent
    space_id, levels_id = space._models[ref][0].id, levels._models[ref][0].id
    typed = "max_queue_delay_us=0,50000"
    changes = [{"kind": "ModelChanged", "model": {"id": space_id}, "attr": attr, "new": typed}
               for attr in ("value_input", "value")]
    changes.append({"kind": "ModelChanged", "model": {"id": levels_id}, "attr": "value_input", "new": "1, 2"})
    enter = {"kind": "MessageSent", "msg_type": "bokeh_event",
             "msg_data": {"type": "event", "name": "enter-pressed", "values": {
                 "type": "map", "entries": [["model", {"id": levels_id}], ["value_input", "1, 2"]]}}}
    message = {"header": {"msgid": "typed", "msgtype": "PATCH-DOC"}, "metadata": {},
               "content": {"events": [*changes, enter]}, "_buffers": {}}
    assert [len(step["content"]["events"]) for step in in_steps(message)] == [3, 1]
    await asyncio.to_thread(client_comm._handle_msg, message)
    assert levels.value == "1, 2"
    assert space.value == typed and heard == [typed]


async def test_run_clicked_right_after_typing_sees_the_typed_text() -> None:
    """A text typed and Run clicked at once (one message, on a busy kernel): the click's
    callback reads the typed text, as a person expects Run to measure it (before, the
    click ran first and the text was then dropped)."""
    import panel as pn

    from workbench.ui.shared.kernel_comm import apply_on_loop

    pn.extension(inline=True)
    space = pn.widgets.TextAreaInput(value="instance_count=1,2")
    run = pn.widgets.Button(label="Run")
    read: list[str | None] = []
    run.on_click(lambda _e: read.append(space.value))
    form = pn.Column(space, run)
    apply_on_loop(form, asyncio.get_running_loop())
    form._repr_mimebundle_()
    ((ref, (comm, client_comm)),) = form._comms.items()
    comm._comm = Transport()
    space_id, run_id = space._models[ref][0].id, run._models[ref][0].id
    typed = "max_queue_delay_us=0,50000"
    click = {"kind": "MessageSent", "msg_type": "bokeh_event", "msg_data": {
        "type": "event", "name": "button_click", "values": {"type": "map", "entries": [["model", {"id": run_id}]]}}}
    message = {"header": {"msgid": "run", "msgtype": "PATCH-DOC"}, "metadata": {}, "_buffers": {},
               "content": {"events": [{"kind": "ModelChanged", "model": {"id": space_id}, "attr": "value",
                                       "new": typed}, click]}}
    await asyncio.to_thread(client_comm._handle_msg, message)
    assert read == [typed] and space.value == typed
