"""The dashboard attached to a v2 server it did not start (issue 32 part 2): a headless
``workbench serve`` and a real ``tritonserver`` 2.51, both as processes on free ports, with
the same python add_sub model and flags (:mod:`workbench.testing.attach`).

The tritonserver runs only where its venv exists (``make test-attach-triton`` makes it:
``scripts/triton_venv.sh``); elsewhere its tests skip saying so.
"""

from __future__ import annotations

import pytest

from workbench.remote import RemoteServer
from workbench.testing.attach import (
    ADMIN_HEADER,
    KINDS,
    send_add_sub,
    server_flags,
    start_server,
    triton_missing,
    write_python_add_sub,
)
from workbench.tuning import RemoteTarget
from workbench.ui.app import Dashboard


@pytest.fixture(scope="module", params=KINDS)
def attached(request, tmp_path_factory):
    """``(kind, process)``: the server the dashboard attaches to, add_sub loaded."""
    missing = triton_missing() if request.param == "triton" else None
    if missing:
        pytest.skip(missing)
    repo = write_python_add_sub(tmp_path_factory.mktemp("attach") / "models")
    process = start_server(request.param, server_flags(repo))
    yield request.param, process
    process.stop()


def url_of(process) -> str:
    return f"http://localhost:{process.port}"


async def beats(board: Dashboard, count: int, traffic: str = "") -> None:
    """``count`` dashboard beats, each after the previous beat's reads ended (and ``traffic``
    requests of add_sub sent between beats when given a URL)."""
    for _ in range(count):
        if traffic:
            await send_add_sub(traffic, 5)
        board.tick()
        await board.store.settle()


async def test_the_tabs_work_on_the_attached_server(attached) -> None:
    kind, process = attached
    url = url_of(process)
    board = Dashboard(RemoteServer(url, headers=ADMIN_HEADER, metrics_urls=[process.metrics_url]), history=30)
    try:
        # Models: index + config (+ memory from statistics)
        await board.models.refresh()
        row = next(r for r in board.models.rows if r.name == "add_sub")
        assert (row.version, row.state, row.backend, row.max_batch_size, row.batching) == \
            ("1", "READY", "python", 8, "dynamic")
        # Live: the statistics API's deltas under a little traffic
        await beats(board, 4, traffic=url)
        kept = board.live.live.history[("add_sub", "1")]
        assert sum(s.requests_per_s * s.interval_s for s in kept) >= 5
        assert any(s.queue_us is not None and s.compute_us is not None for s in kept)
        assert any(v > 0 for v in board.live.series.data["inferences_per_s"])
        assert board.live.model.value == "add_sub/1"
        # Config: the served config, applied as a load with a config override
        await board.config.refresh_models()  # opens the first model, add_sub
        await board.store.settle()
        assert board.config.writable, board.config.read_only_reason
        assert 'name: "add_sub"' in board.config.editor.value
        board.config.editor.value = board.config.editor.value.replace(
            "max_queue_delay_microseconds: 100", "max_queue_delay_microseconds: 700")
        await board.store.settle()
        await board.config.apply()
        assert board.config.status.visible and not board.config.error.visible, board.config.error.object
        served = await board.store.server.model_config("add_sub")
        assert served.dynamic_batching.max_queue_delay_microseconds == 700
        # Headless says in place why not; Tuning drives the server over the network
        assert board.headless_note is not None and board.tabs.objects[-1] is board.headless_note
        assert "not available while attached" in board.headless_note.object
        # so does Rollout (rollouts live in this process's engine): no view calling the engine
        notes = [str(getattr(tab, "object", "")) for tab in board.tabs.objects]
        assert board.rollout is None and any(
            note.startswith("**Rollout** is not available while attached") and "rollouts are set on the engine"
            in note for note in notes), notes
        target = board.store.tuning_target()
        assert isinstance(target, RemoteTarget) and target.url == f"localhost:{process.port}"
        await target.close()
        assert kind in ("workbench", "triton")
    finally:
        board.close()
        await board.store.settle()


async def test_without_the_key_the_tabs_say_the_repository_api_is_restricted(attached) -> None:
    _, process = attached
    board = Dashboard(RemoteServer(url_of(process)), history=30)  # no key for the repository API
    try:
        await board.models.refresh()
        assert board.models.error.visible and "403" in board.models.error.object
        assert "admin-key" in board.models.error.object
    finally:
        board.close()
        await board.store.settle()


async def test_config_is_read_only_where_the_server_refuses_the_override(attached, tmp_path) -> None:
    kind, _ = attached  # the same kind of server, in model control mode "none": loads refused
    flags = [f for f in server_flags(write_python_add_sub(tmp_path / "models"))
             if "model-control-mode" not in f and "restricted" not in f and "load-model" not in f]
    process = start_server(kind, flags)
    board = Dashboard(RemoteServer(url_of(process)), history=30)
    try:
        await board.config.refresh_models()
        await board.store.settle()
        assert board.config.writable  # nothing says otherwise until the server refuses
        await board.config.apply()
        assert board.config.error.visible and "not allowed" in board.config.error.object
        assert "start it with --model-control-mode=explicit" in board.config.error.object  # not "polling"
        await board.config.open("add_sub")
        assert not board.config.writable and board.config.apply_button.disabled
        assert "refused a load with a config override" in board.config.read_only_reason
        assert "read only" in board.config.error.object
        assert "read only" in board.config.apply_button.description
    finally:
        board.close()
        await board.store.settle()
        process.stop()


async def test_replicas_are_summed_and_each_replica_state_shown(attached) -> None:
    _, process = attached
    one, other = url_of(process), f"http://127.0.0.1:{process.port}"  # the same server twice
    single = RemoteServer(one, headers=ADMIN_HEADER)
    both = RemoteServer([one, other, "http://127.0.0.1:9"], headers=ADMIN_HEADER)
    try:
        await send_add_sub(one, 3)
        alone = {(s.name, s.version): s for s in await single.statistics()}[("add_sub", "1")]
        summed = {(s.name, s.version): s for s in await both.statistics(quiet=True)}[("add_sub", "1")]
        assert summed.success_count == 2 * alone.success_count
        row = next(r for r in await both.repository_index() if r["name"] == "add_sub")
        assert row["state"] == "READY"
        assert "http://127.0.0.1:9: not answering" in row["reason"]
        health = await both.health()
        assert health[one]["ready"] and health["http://127.0.0.1:9"]["error"]
    finally:
        await single.close()
        await both.close()
