"""The extension's traitlets and how they become the engine's ServerOptions."""

from __future__ import annotations

import pytest
from traitlets import TraitError
from traitlets.config import Config

from workbench.jupyter.extension import Workbench
from workbench.jupyter.host import EngineHost


def test_defaults_suit_an_interactive_workbench() -> None:
    app = Workbench(config=Config({"Workbench": {"model_repository": ["/models"]}}))
    options = app.engine_options()
    assert options is not None and options.model_repository == ["/models"]
    assert (options.model_control_mode, options.load_model, options.exit_on_error) == ("explicit", ["*"], False)
    assert (options.http_address, options.grpc_address, options.metrics_address) == ("127.0.0.1",) * 3
    assert (options.http_port, options.grpc_port, options.metrics_port) == (8000, 8001, 8002)
    assert app.open_ports is False and app.statistics_interval_s == 1.0


def test_no_repository_no_engine() -> None:
    assert Workbench().engine_options() is None
    host = EngineHost(None, open_ports=False)
    assert host.state == "not configured" and "c.Workbench.model_repository" in host.status()["error"]


def test_command_line_traits_reach_the_options() -> None:
    app = Workbench()
    app.parse_command_line(["--Workbench.model_repository=/a", "--Workbench.model_control_mode=poll",
                            "--Workbench.repository_poll_secs=2.5", "--Workbench.open_ports=True",
                            "--Workbench.http_port=0", "--Workbench.ports_address=0.0.0.0"])
    options = app.engine_options()
    assert options is not None and options.model_repository == ["/a"]
    assert (options.model_control_mode, options.repository_poll_secs) == ("poll", 2.5)
    assert app.open_ports and (options.http_port, options.http_address) == (0, "0.0.0.0")


def test_other_engine_options_pass_through_server_options() -> None:
    app = Workbench(config=Config({"Workbench": {
        "model_repository": ["/m"], "server_options": {"response_cache_byte_size": 4096, "exit_timeout_secs": 5}}}))
    options = app.engine_options()
    assert options is not None
    assert (options.response_cache_byte_size, options.exit_timeout_secs) == (4096, 5)


def test_server_options_may_not_shadow_a_trait() -> None:
    with pytest.raises(TraitError, match=r"set c.Workbench.ports_address instead of server_options\['grpc_address'\]"):
        Workbench(config=Config({"Workbench": {"server_options": {"grpc_address": "0.0.0.0"}}}))


def test_an_unknown_engine_option_is_an_error() -> None:
    app = Workbench(config=Config({"Workbench": {"model_repository": ["/m"], "server_options": {"nope": 1}}}))
    with pytest.raises(ValueError, match="nope"):
        app.engine_options()
    host = EngineHost(None, open_ports=False, error="invalid configuration: nope")
    assert host.state == "failed" and host.status()["error"] == "invalid configuration: nope"


def test_the_ports_key_restricts_tritons_groups() -> None:
    app = Workbench(config=Config({"Workbench": {"model_repository": ["/m"], "open_ports": True,
                                                 "ports_key": "k1", "ports_restricted_api": ["model-repository"]}}))
    options = app.engine_options()
    assert options is not None
    assert options.http_restricted_api == options.grpc_restricted_protocol == ["model-repository:workbench-api-key=k1"]
    assert options.grpc_restrictions()["model-repository"].header == "triton-grpc-protocol-workbench-api-key"
    closed = Workbench(config=Config({"Workbench": {"model_repository": ["/m"]}})).engine_options()
    assert closed is not None and closed.http_restricted_api == []  # no ports: nothing to restrict
    with pytest.raises(TraitError, match="unknown restricted api"):
        Workbench(config=Config({"Workbench": {"ports_restricted_api": ["models"]}}))
