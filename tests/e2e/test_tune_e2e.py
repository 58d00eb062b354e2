"""``workbench tune -u ... -i grpc`` against a real ``workbench serve`` process: measured over
the network (and labelled so), candidates loaded through the load API with a config
override, the model reloaded from its file at the end, and the recommended config printed to
put in the server's repository (``--apply`` is in-process only).

Made to recommend whatever the machine does, as in tests/tuning/test_tune_cli.py: the served config
waits 100 ms for a batch, so only the delay-0 candidate meets a 50 ms p50 SLA at
concurrency 1; a 1000 % tolerance makes every three windows agree.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import tritonclient.grpc as grpcclient

from workbench.hosts.cli import main
from workbench.testing.process import ServerProcess

pytestmark = pytest.mark.e2e


def test_a_remote_run_recommends_and_leaves_the_served_config(tmp_path: Path, sample_repository: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copytree(sample_repository / "digits_mlp", tmp_path / "repo" / "digits_mlp")
    config = tmp_path / "repo" / "digits_mlp" / "config.pbtxt"
    config.write_text(config.read_text().replace("dynamic_batching { }",
                                                 "dynamic_batching { max_queue_delay_microseconds: 100000 }"))
    original = config.read_text()
    server = ServerProcess([f"--model-repository={tmp_path / 'repo'}", "--model-control-mode=explicit",
                            "--load-model=digits_mlp", "--allow-metrics=false"])
    try:
        report = tmp_path / "out.json"
        status = main(["tune", "-m", "digits_mlp", "-u", server.grpc_url, "-i", "grpc",
                       "--server-pid", str(server.process.pid), "--space", "max_queue_delay_us=100000,0",
                       "--concurrency", "1", "--sla-ms", "50", "--percentile", "50",
                       "--stability-percentage", "1000", "--measurement-interval", "300", "--warmup", "100",
                       "--max-windows", "3", "--json", str(report)])
        out = capsys.readouterr().out
        with grpcclient.InferenceServerClient(server.grpc_url) as client:
            served = client.get_model_config("digits_mlp", as_json=True)["config"]
    finally:
        server.stop()
    assert status == 0, out
    assert out.startswith(f"digits_mlp on grpc://{server.grpc_url} (over the network): quick search, 2 points")
    assert "RECOMMENDED: max_queue_delay_us=0 at " in out
    assert "The recommended config: put it in the server's model repository as digits_mlp/config.pbtxt" in out
    printed = out[out.index("then reload the model"):]
    assert 'name: "digits_mlp"' in printed and "max_queue_delay_microseconds: 100000" not in printed
    # the candidate was a temporary load: the server serves its file's config again, untouched
    assert served["dynamic_batching"]["max_queue_delay_microseconds"] == "100000"
    assert config.read_text() == original and not config.with_suffix(".pbtxt.bak").exists()
    points = json.loads(report.read_text())["points"]
    assert all(p["cpu_s_per_inference"] is not None for p in points)  # read from the server's pid
