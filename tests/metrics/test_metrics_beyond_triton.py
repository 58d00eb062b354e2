"""The metrics beyond Triton's that the alert rules need (``workbench_model_ready``,
``workbench_repository_poll*``), read from a real engine's scrape."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.metrics.test_metrics import scrape, series
from workbench import Server, ServerOptions
from workbench.frontends.metrics import MetricsFrontend
from workbench.testing.models import ADD_SUB_CONFIG, add_sub_graph, write_model


def readiness(frontend: MetricsFrontend) -> dict[tuple[str, str], float]:
    samples, types_ = scrape(frontend)
    assert types_["workbench_model_ready"] == "gauge"
    return {(dict(labels)["model"], dict(labels)["version"]): v
            for labels, v in series(samples, "workbench_model_ready").items()}


async def test_model_ready_follows_load_unload_and_failure(mixed_repository: Path) -> None:
    options = ServerOptions(model_repository=[str(mixed_repository)], model_control_mode="explicit",
                            load_model=["add_sub", "broken_onnx", "broken_syntax"], strict_readiness=False,
                            exit_on_error=False)
    async with Server(options) as server:
        frontend = MetricsFrontend(server, server.options)
        ready = readiness(frontend)
        assert ready[("add_sub", "1")] == 1.0
        assert ready[("broken_onnx", "1")] == 0.0  # the version failed to load
        assert ready[("broken_syntax", "")] == 0.0  # failed before any version loaded
        assert not any(model == "versioned" for model, _ in ready)  # never loaded: not known
        await server.unload_model("add_sub")
        ready = readiness(frontend)
        assert ready[("add_sub", "1")] == 0.0  # unloaded: stays in the scrape, at 0


async def test_poll_counters_count_failed_polls(tmp_path: Path) -> None:
    repository = tmp_path / "repo"
    write_model(repository, "add_sub", ADD_SUB_CONFIG, add_sub_graph())
    options = ServerOptions(model_repository=[str(repository)], model_control_mode="poll",
                            repository_poll_secs=0)
    async with Server(options) as server:
        frontend = MetricsFrontend(server, server.options)
        await server.poll_repository()
        samples, types_ = scrape(frontend)
        assert types_["workbench_repository_poll_failures"] == "counter"
        assert series(samples, "workbench_repository_polls_total") == {(): 1.0}
        assert series(samples, "workbench_repository_poll_failures_total") == {(): 0.0}
        repository.rename(tmp_path / "gone")  # the repository folder vanishes: the scan raises
        with pytest.raises(OSError):
            await server.poll_repository()
        samples, _ = scrape(frontend)
        assert series(samples, "workbench_repository_polls_total") == {(): 2.0}
        assert series(samples, "workbench_repository_poll_failures_total") == {(): 1.0}
        assert readiness(frontend)[("add_sub", "1")] == 1.0  # the failed poll unloaded nothing


async def test_no_poll_counters_outside_poll_mode(server: Server) -> None:
    _, types_ = scrape(MetricsFrontend(server, server.options))
    assert "workbench_repository_polls" not in types_
    assert set(readiness(MetricsFrontend(server, server.options)).values()) == {1.0}
