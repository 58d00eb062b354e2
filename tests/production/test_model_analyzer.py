"""NVIDIA's Triton Model Analyzer (``triton-model-analyzer`` from PyPI, with the real perf_analyzer)
profiles ``digits_mlp`` on ``workbench serve``, CPU only, as users run it: remote mode against a
running server (explicit model control), and local mode with ``--triton-server-path`` pointing at
the tritonserver-compatible launcher from :mod:`workbench.deploy.model_analyzer`. Each run must
complete, write its summary and detailed reports and the inference CSV, with measurements of
the default configuration and of the candidates it loaded into the server (``load_model`` with
a config override). A small search (max batch size 1-2, one instance, concurrency 1-2): a few
minutes per mode on 2 shared cores.

The tools live in ``.venv-production/model-analyzer`` (``scripts/model_analyzer_env.sh``, built
on first use, a few minutes; ``MODEL_ANALYZER_ENV=DIR`` uses another folder).
"""

from __future__ import annotations

import csv
import html
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tritonclient.http as httpclient

from workbench.deploy import yaml_text
from workbench.deploy.model_analyzer import launcher_script, profile_config
from workbench.testing.ensembles import build_ensemble_repository
from workbench.testing.process import ServerProcess, free_ports

ROOT = Path(__file__).resolve().parents[2]
MODEL = "digits_mlp"
#: perf_analyzer's stability threshold (default 10 %): on 2 shared cores, runs of 10 % are
#: rare and Model Analyzer gives a configuration up after 10 unstable tries
PA_FLAGS = {"stability-percentage": 50}


@pytest.fixture(scope="module")
def tools() -> Path:
    """The folder with ``bin/model-analyzer`` and ``bin/perf_analyzer`` (made when missing)."""
    probe = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=False)
    if "libb64.so.0d" not in probe.stdout:
        pytest.skip("libb64-0d (perf_analyzer's) not installed (apt-get install libb64-0d)")
    folder = Path(os.environ.get("MODEL_ANALYZER_ENV", ROOT / ".venv-production" / "model-analyzer"))
    made = subprocess.run(["bash", str(ROOT / "scripts" / "model_analyzer_env.sh"), str(folder)],
                          capture_output=True, text=True, timeout=1200, check=False)
    assert made.returncode == 0, made.stdout + made.stderr
    return folder


@pytest.fixture
def repository(sample_repository: Path, tmp_path: Path) -> Path:
    """A repository holding only ``digits_mlp`` (a copy: Model Analyzer reads it)."""
    repo = tmp_path / "repository"
    shutil.copytree(sample_repository / MODEL, repo / MODEL, symlinks=False)
    return repo


def _profile(tools: Path, config: dict[str, object], folder: Path) -> subprocess.CompletedProcess[str]:
    """``model-analyzer profile -f`` with ``config`` (written as YAML into ``folder``)."""
    path = folder / "profile.yaml"
    path.write_text(yaml_text.dump(config), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # its own venv, nothing of ours
    return subprocess.run([str(tools / "bin" / "model-analyzer"), "profile", "-f", str(path)], cwd=folder,
                          env=env, capture_output=True, text=True, timeout=1500, check=False)


def _column(row: dict[str, str], name: str) -> str:
    """The value of the one column of ``row`` whose header contains ``name``."""
    (value,) = [v for k, v in row.items() if name in k]
    return value


def _check_reports(run: subprocess.CompletedProcess[str], export: Path, model: str = MODEL) -> list[dict[str, str]]:
    """The run completed and wrote its reports for ``model``; returns the inference CSV's rows."""
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-6000:]
    assert "Profile complete" in output, output[-6000:]
    summary = export / "reports" / "summaries" / model / "result_summary.html"
    assert summary.is_file(), output[-6000:]
    assert list((export / "reports" / "detailed").glob(f"{model}_config_*/detailed_report.html"))
    with open(export / "results" / "metrics-model-inference.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert rows and {row["Model"] for row in rows} == {model}, rows
    # an ensemble's rows name its composing models' configs too: "e_config_0: m_config_1, ..."
    configs = {row["Model Config Path"].split(":")[0] for row in rows}
    # the default configuration and at least one candidate Model Analyzer loaded with a config override
    assert f"{model}_config_default" in configs and len(configs) >= 2, rows
    for row in rows:
        assert all(group.endswith(":CPU") for group in row["Instance Group"].split(",")), row
        assert float(row["Throughput (infer/sec)"]) > 0, row
        assert float(row["p99 Latency (ms)"]) > 0, row
        # perf_analyzer's server-side split, from the statistics extension
        assert float(_column(row, "Server Queue")) >= 0 and float(_column(row, "Server Compute Infer")) >= 0, row
    # the CSV has 0.1 ms resolution: digits_mlp's compute (tens of µs a request) may read 0.0 in a row
    assert any(float(_column(row, "Server Compute Infer")) > 0 for row in rows), rows
    text = re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", summary.read_text(encoding="utf-8"))))
    recommendation = re.search(r"In \d+ measurements across \d+ configurations, .*?constraints\.", text)
    assert recommendation, text[:2000]
    print(f"\nmodel-analyzer: {recommendation.group(0)}")
    return rows



def _remote_config(models: list[str], repository: Path, server: ServerProcess, export: Path,
                   tmp_path: Path, tools: Path) -> dict[str, object]:
    """The small remote-mode search every remote test runs (c <= 2, one instance, batch <= 2)."""
    return profile_config(models, str(repository), launch_mode="remote",
                          http_endpoint=server.url, grpc_endpoint=server.grpc_url,
                          metrics_url=server.metrics_url, export_path=str(export),
                          output_model_repository=str(tmp_path / "output-repository"),
                          max_concurrency=2, max_instance_count=1, max_batch_size=2,
                          perf_analyzer_path=str(tools / "bin" / "perf_analyzer"),
                          perf_analyzer_flags=PA_FLAGS)


def test_remote_mode_profiles_a_running_server(tools: Path, repository: Path, tmp_path: Path) -> None:
    server = ServerProcess([f"--model-repository={repository}", "--model-control-mode=explicit",
                            f"--load-model={MODEL}"])
    try:
        export = tmp_path / "export"
        config = _remote_config([MODEL], repository, server, export, tmp_path, tools)
        run = _profile(tools, config, tmp_path)
        _check_reports(run, export)
        # each candidate was loaded into the running server (the startup load, then one per config)
        assert server.log.count(f"successfully loaded '{MODEL}' version 1") >= 3, server.log[-4000:]
        assert "failed to load" not in server.log, server.log[-4000:]
        client = httpclient.InferenceServerClient(server.url)
        assert client.is_server_ready() and client.is_model_ready(MODEL)
        client.close()
    finally:
        assert server.stop() == 0, server.log[-4000:]


def test_local_mode_starts_the_launcher(tools: Path, repository: Path, tmp_path: Path) -> None:
    launcher = tmp_path / "tritonserver"
    launcher.write_text(launcher_script((sys.executable, "-m", "workbench.hosts.cli"),
                                        env={"PYTHONPATH": str(ROOT)}), encoding="utf-8")
    launcher.chmod(0o755)
    http, grpc, metrics = free_ports(3)
    export = tmp_path / "export"
    config = profile_config([MODEL], str(repository), launch_mode="local", server_path=str(launcher),
                            http_endpoint=f"localhost:{http}", grpc_endpoint=f"localhost:{grpc}",
                            metrics_url=f"http://localhost:{metrics}/metrics", export_path=str(export),
                            output_model_repository=str(tmp_path / "output-repository"),
                            max_concurrency=2, max_instance_count=1, max_batch_size=1,
                            perf_analyzer_path=str(tools / "bin" / "perf_analyzer"),
                            perf_analyzer_flags=PA_FLAGS)
    config["triton_output_path"] = str(tmp_path / "server.log")
    run = _profile(tools, config, tmp_path)
    rows = _check_reports(run, export)
    server_log = (tmp_path / "server.log").read_text(encoding="utf-8")
    assert "Started HTTPService" in server_log and "failed to load" not in server_log, server_log[-4000:]
    # the process Model Analyzer measured is the server (the launcher exec'd it): its memory, in MB
    assert all(float(_column(row, "RAM Usage")) > 10 for row in rows), rows


def test_remote_mode_profiles_an_ensemble_and_its_composing_models(tools: Path, tmp_path: Path) -> None:
    # Model Analyzer loads each composing model's candidate before the ensemble's, waiting for
    # /v2/health/ready in between: the ensemble, no longer fitting a smaller max batch size for a
    # moment, must not make the server unready (it did: "Could not determine server readiness")
    repository = build_ensemble_repository(tmp_path / "repository")
    server = ServerProcess([f"--model-repository={repository}", "--model-control-mode=explicit"])
    try:
        export = tmp_path / "export"
        config = _remote_config(["ens_chain"], repository, server, export, tmp_path, tools)
        # ensembles are searched in quick mode, which varies the composing models too
        config.update(run_config_search_mode="quick", cpu_only_composing_models=["add_sub", "identity16"])
        run = _profile(tools, config, tmp_path)
        _check_reports(run, export, "ens_chain")
        client = httpclient.InferenceServerClient(server.url)
        assert client.is_server_ready() and client.is_model_ready("ens_chain")
        client.close()
    finally:
        assert server.stop() == 0, server.log[-4000:]
