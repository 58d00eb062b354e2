"""The attach pieces that need no server: URLs and headers as typed, refusals as errors,
statistics JSON summed over replicas (the tabs on a real server: tests/e2e/test_attach_e2e.py)."""

from __future__ import annotations

import asyncio

import pytest

from workbench import InvalidArgument, ModelNotFound, ModelNotReady, Unavailable
from workbench.remote import RemoteServer
from workbench.remote.client import RemoteVersionStats, error_of, parse_urls
from workbench.ui.attach.attach_view import AttachBar, parse_headers

STATS = {"name": "m", "version": "1", "inference_count": 6, "execution_count": 2,
         "inference_stats": {"success": {"count": 3, "ns": 300}, "fail": {"count": 1, "ns": 5},
                             "queue": {"count": 3, "ns": 30}, "compute_input": {"count": 2, "ns": 1},
                             "compute_infer": {"count": 2, "ns": 10}, "compute_output": {"count": 2, "ns": 2}},
         "batch_stats": [{"batch_size": 1, "compute_infer": {"count": 1, "ns": 3}},
                         {"batch_size": "4", "compute_infer": {"count": "1", "ns": "7"}}],
         "memory_usage": [{"type": "CPU", "id": 0, "byte_size": 100}]}


def test_urls_as_typed() -> None:
    assert parse_urls("host:8000") == ["http://host:8000"]
    assert parse_urls(" http://a:8000/, b:8000  http://a:8000") == ["http://a:8000", "http://b:8000"]
    for bad in ("", " , ", "grpc://a:8001"):
        with pytest.raises(ValueError):
            parse_urls(bad)


def test_headers_as_typed() -> None:
    assert parse_headers("") == {}
    assert parse_headers("admin-key: s3cret; X-Other: a:b\nThird: 3") == {
        "admin-key": "s3cret", "X-Other": "a:b", "Third": "3"}
    for bad in ("no colon", ": value"):
        with pytest.raises(ValueError):
            parse_headers(bad)


def test_refusals_become_the_errors_of_their_status() -> None:
    assert isinstance(error_of(404, "x"), ModelNotFound)
    assert isinstance(error_of(400, "Request for unknown model: 'm' is not found"), ModelNotFound)
    assert isinstance(error_of(400, "Request for unknown model: 'm' has no available versions"),
                      ModelNotReady)
    assert isinstance(error_of(400, "bad config"), InvalidArgument)
    refused = error_of(403, "This API is restricted, expecting header 'admin-key'")
    assert isinstance(refused, Unavailable) and refused.message.startswith("forbidden (403): ")


def test_statistics_json_read_and_summed_over_replicas() -> None:
    one = RemoteVersionStats.of(STATS)
    assert (one.success_count, one.fail_count, one.queue_ns, one.compute_ns) == (3, 1, 30, 13)
    assert one.executions == {1: 1, 4: 1} and one.memory_usage[0].byte_size == 100
    both = one.plus(one)
    assert (both.success_count, both.inference_count, both.executions) == (6, 12, {1: 2, 4: 2})


async def test_a_malformed_entry_is_said_and_nothing_changes() -> None:
    attached: list[RemoteServer] = []
    bar = AttachBar(attached.append, None)
    bar.url.value_input = "grpc://a:8001"
    assert bar.attach() is None and attached == []
    assert bar.error.visible and "only http:// and https://" in bar.error.object
    bar.url.value_input, bar.headers.value_input = "a:8000", "admin-key: s3cret"
    remote = bar.attach()
    assert remote is not None and attached == [remote] and remote.headers == {"admin-key": "s3cret"}
    assert bar.headers.value_input == "" and "s3cret" not in repr(remote)
    assert not bar.detach_button.visible  # no engine here to go back to
    await remote.close()


def test_replicas_index_one_row_per_version_and_a_refusal_in_its_words() -> None:
    """Two replicas: a model loaded on one only is one row per version (READY), the other's
    version-less row its state there (it was a second, blank row, and the READY one said the
    other replica had not got it); a replica that refused the index says why (a 403 was "not
    answering"). New-user trial findings 3 and 4; both failed before."""
    from workbench.remote.client import _fold_unversioned, _merged_row

    a, b = "http://a:8000", "http://b:8000"
    merged = {("m", "1"): {b: {"name": "m", "version": "1", "state": "READY", "reason": ""}},
              ("m", ""): {a: {"name": "m", "state": "UNAVAILABLE", "reason": "unloaded"}}}
    _fold_unversioned(merged)
    assert list(merged) == [("m", "1")]
    row = _merged_row("m", "1", merged[("m", "1")], [a, b], {a: [], b: []})
    assert row["state"] == "READY" and "not in its index" not in row["reason"], row
    assert f"{a}: UNAVAILABLE (unloaded)" in row["reason"] and f"{b}: READY" in row["reason"]
    refused = error_of(403, "This API is restricted, expecting header 'workbench-api-key'")
    row = _merged_row("m", "1", merged[("m", "1")], [a, b], {a: refused, b: []})
    assert f"{a}: forbidden (403): This API is restricted" in row["reason"], row


async def test_a_closed_client_is_a_detached_server_not_an_unexpected_error() -> None:
    """A refresh still running when the dashboard attached elsewhere (the client closed) is
    Unavailable "detached" (it was httpx's RuntimeError, logged with a traceback: trial
    finding 5); health and /metrics reads say it as an answer, not raise."""
    remote = RemoteServer("http://127.0.0.1:9", metrics_urls=["http://127.0.0.1:9/metrics"])
    await remote.close()
    with pytest.raises(Unavailable, match="detached from"):
        await remote.repository_index()
    health = await remote.health()
    assert "detached from" in health["http://127.0.0.1:9"]["error"], health


async def test_live_overlays_each_replica_and_plots_their_sum(repository) -> None:
    """Two replicas (real HTTP listeners), traffic on one only: the Live tab's overlay has one
    line per replica named by its host:port, only the busy one with throughput, while the
    plots above show their sum; a version served by one replica only is "not loaded" on the
    other. (The overlay summed the replicas: issue 32 part 4; this failed before.)"""
    from tests.ui.ui_helpers import add_sub_request
    from workbench import ServerOptions
    from workbench.testing.http_listener import http_listener
    from workbench.ui.live.live_view import LiveView
    from workbench.ui.shared.store import EngineStore

    def options(*models: str) -> ServerOptions:
        return ServerOptions(model_repository=[str(repository)], model_control_mode="explicit",
                             load_model=list(models))

    async with http_listener(options("add_sub", "digits_mlp")) as busy, http_listener(options("add_sub")) as idle:
        urls = [f"http://127.0.0.1:{busy.port}", f"http://127.0.0.1:{idle.port}"]
        remote = RemoteServer(urls)
        store = EngineStore(remote)
        view = LiveView(store, gpu=None)
        try:
            assert view.overlay.visible and view.overlay.value == "replicas"
            for _ in range(4):  # each beat closes the interval of the previous beat's reads
                await asyncio.gather(*(busy.server.infer(add_sub_request()) for _ in range(10)))
                view.tick()
                await store.settle()
            view.model.value = "add_sub/1"
            view.tick()
            lines = view.versions["versions_throughput"]
            names = [url.split("://")[1] for url in urls]
            assert lines["label"] == names, lines["label"]
            assert max(lines["ys"][0]) > 0 and max(lines["ys"][1], default=0) == 0, lines["ys"]
            assert view.versions["versions_latency"]["label"] == [
                f"{names[0]} p50", f"{names[0]} p99", f"{names[1]} p50", f"{names[1]} p99"]
            assert view.figures["versions_throughput"].title.text == "Replicas: throughput"
            assert max(view.series.data["inferences_per_s"]) > 0  # the sum, above
            assert "the sum of 2 replicas" in view.status.object
            view.model.value = "digits_mlp/1"
            assert view.versions["versions_throughput"]["label"] == [
                names[0], f"{names[1]}: not loaded"]
            view.overlay.value = "versions"  # the versions overlay stays one click away
            assert view.versions["versions_throughput"]["label"] == ["v1", "v2"]
            assert view.figures["versions_throughput"].title.text == "Versions: throughput"
        finally:
            view.close()
            await store.settle()
            await remote.close()


async def test_attached_config_apply_says_what_the_server_did(repository) -> None:
    """Attached, Apply loads the model with a config override: the banner says so (it said
    "written <url>; reloaded" although nothing was written), the diff is against the served
    config (not "the file on disk") and there is no Revert (no backup exists). New-user trial
    finding (a); this failed before."""
    from workbench import ServerOptions
    from workbench.testing.http_listener import http_listener
    from workbench.ui.config.config_view import ConfigView
    from workbench.ui.shared.store import EngineStore

    options = ServerOptions(model_repository=[str(repository)], model_control_mode="explicit",
                            load_model=["add_sub"])
    async with http_listener(options) as listener:
        url = f"http://127.0.0.1:{listener.port}"
        remote = RemoteServer(url)
        store = EngineStore(remote)
        view = ConfigView(store)
        try:
            view.model.value = "add_sub"
            await store.settle()
            assert view.writable, view.read_only_reason
            assert not view.revert_button.visible
            assert view.apply_button.label == "Apply (load with config override)"
            assert "served config" in view.diff_heading.object and "on disk" not in view.diff_heading.object
            view.editor.value = view.editor.value.replace("max_batch_size: 8", "max_batch_size: 16")
            assert "(served)" in view.diff.object and "on disk" not in view.diff.object
            await store.settle()
            await view.apply()
            assert not view.error.visible, view.error.object
            assert view.status.object.startswith(f"loaded add_sub on {url} with this config as an override")
            assert "written" not in view.status.object and "reloaded" not in view.status.object
            assert (await remote.model_config("add_sub")).max_batch_size == 16
        finally:
            await store.settle()
            await remote.close()


async def test_a_model_not_loaded_on_the_attached_server_says_so(repository) -> None:
    """A model the attached server lists but never loaded: its Models row says "not loaded on
    <server>" (state and reason were blank), and the Live tab, with that model chosen in
    another tab, says so instead of plotting another model silently. New-user trial finding
    (b); this failed before."""
    from workbench import ServerOptions
    from workbench.testing.http_listener import http_listener
    from workbench.ui.live.live_view import LiveView
    from workbench.ui.models.model_rows import model_rows
    from workbench.ui.shared.store import EngineStore

    options = ServerOptions(model_repository=[str(repository)], model_control_mode="explicit",
                            load_model=["add_sub"])
    async with http_listener(options) as listener:
        url = f"http://127.0.0.1:{listener.port}"
        remote = RemoteServer(url)
        store = EngineStore(remote)
        view = LiveView(store, gpu=None)
        try:
            rows = {row.name: row for row in await model_rows(remote)}
            assert rows["digits_mlp"].reason == f"not loaded on {url}", rows["digits_mlp"]
            assert rows["add_sub"].reason == ""
            for _ in range(2):
                view.tick()
                await store.settle()
            assert view.model.options == ["add_sub/1"]
            store.selection.choose("digits_mlp")  # e.g. its Live button in the Models table
            assert view.status.object.startswith(f"**digits_mlp** is not loaded on {url}: nothing of it to plot")
            store.selection.choose("add_sub")
            assert view.status.object.startswith("add_sub/1: ")
        finally:
            view.close()
            await store.settle()
            await remote.close()
