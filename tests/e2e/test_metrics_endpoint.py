"""`workbench serve` metrics listener: scraped over HTTP, turned off, busy port."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.http as httpclient
from prometheus_client.parser import text_string_to_metric_families

from workbench.testing.process import ServerProcess

pytestmark = pytest.mark.e2e


def add_sub_inputs() -> list[httpclient.InferInput]:
    inputs = [httpclient.InferInput(f"INPUT{i}", [1, 16], "FP32") for i in range(2)]
    for tensor in inputs:
        tensor.set_data_from_numpy(np.ones((1, 16), np.float32))
    return inputs


def test_metrics_scraped_over_http(test_repository: Path) -> None:
    server = ServerProcess([f"--model-repository={test_repository}", "--http-address=127.0.0.1",
                            "--metrics-address=127.0.0.1"])
    try:
        assert server.metrics_port not in (0, server.port)
        assert f"Started Metrics Service at 127.0.0.1:{server.metrics_port}" in server.log
        client = httpclient.InferenceServerClient(server.url)
        for _ in range(2):
            client.infer("add_sub", add_sub_inputs())
        stats = client.get_inference_statistics("add_sub")["model_stats"][0]
        client.close()
        response = httpx.get(server.metrics_url)
        assert response.status_code == 200
        assert response.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
        assert 'nv_inference_request_success{model="add_sub",version="1"} 2.0\n' in response.text
        families = {f.name: f for f in text_string_to_metric_families(response.text)}
        duration = next(s.value for s in families["nv_inference_request_duration_us"].samples
                        if s.labels == {"model": "add_sub", "version": "1"})
        assert duration == pytest.approx(int(stats["inference_stats"]["success"]["ns"]) / 1000, abs=1e-3)
        assert "nv_cpu_utilization" in families
        assert httpx.get(server.metrics_url.replace("/metrics", "/v2")).status_code == 404
    finally:
        assert server.stop() == 0


def test_allow_metrics_false_starts_no_listener(test_repository: Path) -> None:
    server = ServerProcess([f"--model-repository={test_repository}", "--allow-metrics=false"])
    try:
        assert server.metrics_port == 0
        assert "Metrics Service" not in server.log
        assert httpclient.InferenceServerClient(server.url).is_server_ready()
    finally:
        assert server.stop() == 0


def test_busy_metrics_port_is_one_clear_line(test_repository: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "workbench.hosts.cli", "serve",
             f"--model-repository={test_repository}", "--http-port=0", "--grpc-port=0",
             "--metrics-address=127.0.0.1", f"--metrics-port={port}"],
            capture_output=True, text=True, timeout=120,
        )
    assert result.returncode == 1
    expected = f"failed to start Metrics service: Unavailable - Socket '127.0.0.1:{port}' already in use"
    assert expected in result.stderr
    assert "Traceback" not in result.stderr and "Started HTTPService" not in result.stderr
