"""The Headless tab: a real ``workbench serve`` started and stopped from the panel; deployment
files written from it."""

from __future__ import annotations

import asyncio
import os
import socket
from pathlib import Path

import pytest
import yaml

from workbench.testing.process import free_ports
from workbench.ui.headless_view import HeadlessView, user_text
from workbench.ui.serve_process import DEFAULT_PORTS, suggested_ports, taken_ports
from workbench.ui.store import EngineStore


def test_suggested_ports_leave_out_busy_ones(store: EngineStore) -> None:
    held = []
    for port in DEFAULT_PORTS:  # as the engine hosting the dashboard may hold them
        holder = socket.socket()
        try:
            holder.bind(("", port))
            holder.listen()
        except OSError:
            holder.close()  # busy already: as good
            continue
        held.append(holder)
    try:
        ports = suggested_ports()
        assert ports != DEFAULT_PORTS
        assert ports[1] == ports[0] + 1 and ports[2] == ports[0] + 2 and ports[0] % 100 == 0
        view = HeadlessView(store)
        assert (view.http_port.value, view.grpc_port.value, view.metrics_port.value) == ports
        # the form says which were taken and that the proposed ones are free
        note = view.ports_note.object
        assert "Taken: 8000, 8001, 8002" in note and f"proposing {ports[0]}, {ports[1]} and {ports[2]}" in note
    finally:
        for holder in held:
            holder.close()


def test_a_port_held_on_ipv6_loopback_only_is_not_proposed() -> None:
    """A server listening on ``::1`` only (bound to ``localhost``, which resolves to ``::1``
    first on many machines) held 8000 while an IPv4-only probe found it free and proposed it."""
    if not socket.has_ipv6:
        pytest.skip("no IPv6 here")
    holder = socket.socket(socket.AF_INET6)
    try:
        holder.bind(("::1", DEFAULT_PORTS[0]))
        holder.listen()
    except OSError as exc:
        holder.close()
        pytest.skip(f"cannot hold [::1]:{DEFAULT_PORTS[0]} here: {exc}")
    try:
        assert suggested_ports()[0] != DEFAULT_PORTS[0]
        assert taken_ports(DEFAULT_PORTS)[:1] == [DEFAULT_PORTS[0]]
    finally:
        holder.close()


async def wait_for_health(view: HeadlessView, wanted: str, timeout_s: float = 90.0) -> str:
    deadline = asyncio.get_running_loop().time() + timeout_s
    health = ""
    while asyncio.get_running_loop().time() < deadline:
        health = await view.poll()
        if health == wanted:
            return health
        await asyncio.sleep(0.2)
    pytest.fail(f"health {health!r}, not {wanted!r}, after {timeout_s} s:\n{view.log.object}")


async def test_start_health_log_and_stop_a_real_serve_process(store: EngineStore, repository: Path) -> None:
    view = HeadlessView(store)
    assert view.repository.value == str(repository)  # the engine's repository
    view.http_port.value, view.grpc_port.value, view.metrics_port.value = free_ports(3)
    view.start_button.clicks += 1
    await store.settle()
    process = view.process
    assert process is not None and process.running
    assert view.start_button.disabled and not view.stop_button.disabled
    await wait_for_health(view, "READY")
    assert f"Started HTTPService at 127.0.0.1:{view.http_port.value}" in view.log.object
    assert view.health.object.startswith("**READY**")
    view.start_button.clicks += 1  # disabled in the browser; from code: refused in place
    await store.settle()
    view.stop_button.clicks += 1
    await store.settle()
    assert not process.running and process.returncode == 0
    with pytest.raises(ProcessLookupError):
        os.kill(process.pid, 0)
    assert view.health.object.startswith("**EXITED (0)**")
    assert not view.start_button.disabled


async def test_a_process_that_exits_at_once_shows_its_status_and_log(store: EngineStore, tmp_path: Path) -> None:
    view = HeadlessView(store)
    view.repository.value = str(tmp_path / "missing")
    view.http_port.value, view.grpc_port.value, view.metrics_port.value = free_ports(3)
    await view.start()
    health = await wait_for_health(view, "EXITED (1)")
    assert health == "EXITED (1)" and "missing" in view.log.object
    assert not view.start_button.disabled


async def test_close_stops_the_sessions_process(store: EngineStore) -> None:
    view = HeadlessView(store)
    view.http_port.value, view.grpc_port.value, view.metrics_port.value = free_ports(3)
    await view.start()
    process = view.process
    assert process is not None
    view.close()
    assert not process.running


async def test_write_deployment_from_the_panel(store: EngineStore, tmp_path: Path) -> None:
    view = HeadlessView(store)
    # the folder shown is the one written to: a real absolute path, not a placeholder
    out_dir, repository = view.out_dir.value, view.repository.value
    assert out_dir is not None and repository is not None
    assert Path(out_dir).is_absolute() and not view.deploy_button.disabled
    assert not Path(out_dir).resolve().is_relative_to(Path(repository).resolve())
    view.out_dir.value = ""
    assert view.deploy_button.disabled  # nothing to write into: the button cannot be clicked
    await view.write_deployment()  # from code: a sentence, no exception name
    assert view.deploy_error.visible and view.deploy_error.object == "choose a deployment folder"
    view.out_dir.value, view.deploy_name.value = str(tmp_path / "out"), "adder"
    assert not view.deploy_button.disabled
    view.deploy_button.clicks += 1
    await store.settle()
    assert not view.deploy_error.visible and not view.error.visible
    deployment = yaml.safe_load((tmp_path / "out" / "k8s" / "deployment.yaml").read_text())
    assert deployment["metadata"]["name"] == "adder"
    assert (tmp_path / "out" / "models" / "digits_mlp" / "config.pbtxt").is_file()
    assert "k8s/hpa.yaml" in view.written.object and "requirements-models.txt" in view.written.object
    view.deploy_name.value = "Bad Name"
    await view.write_deployment()
    assert view.deploy_error.visible and "DNS-1123" in view.deploy_error.object
    assert "Error" not in view.deploy_error.object and view.written.object == ""  # no stale list
    view.deploy_name.value = "adder"
    view.out_dir.value = view.repository.value + "/inside"
    await view.write_deployment()
    assert view.deploy_error.object.startswith("not written: the output folder")
    assert "ValueError" not in view.deploy_error.object
    view.out_dir.value = str(tmp_path / "out")
    await view.write_deployment()
    assert not view.deploy_error.visible  # the next action clears the banner


def test_errors_read_as_sentences() -> None:
    assert user_text(FileNotFoundError(2, "No such file or directory", "/x")) == \
        "No such file or directory: '/x'"
    assert user_text(ValueError("choose a deployment folder")) == "choose a deployment folder"
    assert "Error" not in user_text(RuntimeError())


async def test_deployment_warns_about_python_model_imports(store: EngineStore, tmp_path: Path) -> None:
    repo = tmp_path / "models"
    (repo / "custom" / "1").mkdir(parents=True)
    (repo / "custom" / "config.pbtxt").write_text('name: "custom"\nbackend: "python"\n')
    (repo / "custom" / "1" / "model.py").write_text("import yaml\nimport no_such_package_here\n")
    view = HeadlessView(store)
    view.repository.value, view.out_dir.value = str(repo), str(tmp_path / "out")
    await view.write_deployment()
    assert "`pyyaml==" in view.written.object
    assert view.deploy_warnings.visible and "no_such_package_here" in view.deploy_warnings.object
    assert "pyyaml==" in (tmp_path / "out" / "requirements-models.txt").read_text()


async def test_a_cleared_port_is_asked_for_and_nothing_starts(store: EngineStore) -> None:
    """A number field a person empties holds None (Panel's IntInput): Start says which port
    to enter instead of starting ``workbench serve --http-port=None``."""
    view = HeadlessView(store)
    view.http_port.value, view.grpc_port.value, view.metrics_port.value = free_ports(3)
    view.grpc_port.value = None
    await view.start()
    assert view.process is None
    assert view.error.visible and view.error.object == "enter the gRPC port"


async def test_a_cleared_deployment_number_is_asked_for(store: EngineStore, tmp_path: Path) -> None:
    """An emptied max replicas or queue time target is a sentence asking for it, not an
    unexpected error (a comparison with None inside ``DeploySpec``)."""
    view = HeadlessView(store)
    view.out_dir.value = str(tmp_path / "out")
    view.max_replicas.value = None
    await view.write_deployment()
    assert view.deploy_error.visible and view.deploy_error.object == "enter the max replicas"
    view.max_replicas.value, view.queue_target.value = 2, None
    await view.write_deployment()
    assert view.deploy_error.object == "enter the HPA queue time target (µs)"
    assert not (tmp_path / "out").exists()


async def test_a_paste_that_sets_value_and_value_input_at_once_enables_start(store: EngineStore) -> None:
    """A paste (the browser sends ``value_input`` and ``value`` in one batch) calls the watcher
    with both events at once: the buttons must follow the field, not fail with a TypeError."""
    view = HeadlessView(store)
    view.repository.param.update(value="", value_input="")
    assert view.start_button.disabled
    view.repository.param.update(value="sample_models/repository", value_input="sample_models/repository")
    assert not view.start_button.disabled and not view.deploy_button.disabled
