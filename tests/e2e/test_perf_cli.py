"""`workbench perf` as a process against a real `workbench serve` process, over HTTP and gRPC;
its reports, summary lines and errors (one line, exit status 1, no traceback)."""

from __future__ import annotations

import csv
import json
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from workbench.hosts.cli import main
from workbench.testing.process import ServerProcess

pytestmark = pytest.mark.e2e

HEADER = ("Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,"
          "Server Compute Input,Server Compute Infer,Server Compute Output,Client Recv,"
          "p50 latency,p90 latency,p95 latency,p99 latency")
SUMMARY = re.compile(r"^(Concurrency|Request Rate): (\S+), throughput: ([\d.e+]+) infer/sec, "
                     r"latency (\d+) usec$", re.MULTILINE)
QUICK = ("-p", "300", "--warmup-interval", "100")


@pytest.fixture(scope="module")
def digits_server(sample_repository: Path):
    """`workbench serve` with only digits_mlp loaded (explicit mode)."""
    process = ServerProcess([f"--model-repository={sample_repository}",
                             "--model-control-mode=explicit", "--load-model=digits_mlp"])
    yield process
    process.stop()


def perf(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "workbench.hosts.cli", "perf", *args],
                          capture_output=True, text=True, timeout=120)


def read_csv(path: Path) -> list[dict]:
    with path.open(newline="") as file:
        return list(csv.DictReader(file))


def test_http_concurrency_sweep_writes_perf_analyzers_csv_and_json(digits_server, tmp_path) -> None:
    report, records = tmp_path / "out.csv", tmp_path / "out.json"
    done = perf("-m", "digits_mlp", "-u", digits_server.url, "-i", "http",
                "--concurrency-range", "1:2", *QUICK, "-f", str(report), "--json", str(records))
    assert done.returncode == 0, done.stderr
    assert report.read_text().splitlines()[0] == HEADER
    rows = read_csv(report)
    assert sorted(int(r["Concurrency"]) for r in rows) == [1, 2]
    throughputs = [float(r["Inferences/Second"]) for r in rows]
    assert throughputs == sorted(throughputs) and throughputs[0] > 0  # perf_analyzer's order
    for row in rows:
        assert int(row["Server Compute Infer"]) > 0
        assert int(row["p50 latency"]) <= int(row["p99 latency"])
    loaded = json.loads(records.read_text())
    assert [list(r)[: len(rows[0])] for r in loaded] == [HEADER.split(",")] * 2
    assert [r["Concurrency"] for r in loaded] == [int(r["Concurrency"]) for r in rows]
    summary = SUMMARY.findall(done.stdout)
    assert [(kind, level) for kind, level, _, _ in summary] == [("Concurrency", "1"),
                                                               ("Concurrency", "2")]
    assert "Avg HTTP time:" in done.stdout and "Avg request latency:" in done.stdout


def test_grpc_request_rate_over_the_default_percentile_flags(digits_server, tmp_path) -> None:
    report = tmp_path / "rate.csv"
    done = perf("-m", "digits_mlp", "-u", digits_server.grpc_url, "-i", "grpc",
                "--request-rate-range", "50:100:50", "--request-distribution", "poisson",
                "--percentile", "95", *QUICK, "-f", str(report), "--verbose-csv")
    assert done.returncode == 0, done.stderr
    header = report.read_text().splitlines()[0]
    assert header == ("Request Rate" + HEADER[len("Concurrency"):]
                      + ",request/response,response wait")  # no Avg latency with --percentile
    assert sorted(float(r["Request Rate"]) for r in read_csv(report)) == [50, 100]
    assert "Avg gRPC time:" in done.stdout
    assert "Inferences/Second vs. Client p95 Batch Latency" in done.stdout
    assert [m[0] for m in SUMMARY.findall(done.stdout)] == ["Request Rate"] * 2


def test_unknown_model_is_one_line_and_status_1(digits_server) -> None:
    done = perf("-m", "nope", "-u", digits_server.url, *QUICK)  # the real process: no traceback
    assert done.returncode == 1
    assert done.stderr.strip() == ("workbench perf: error: failed to get model metadata: "
                                   "Request for unknown model: 'nope' is not found")


def test_unreachable_server_is_one_line_and_status_1(capsys) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens there
    for protocol in ("http", "grpc"):
        assert main(["perf", "-m", "digits_mlp", "-u", f"127.0.0.1:{port}", "-i", protocol]) == 1
        err = capsys.readouterr().err
        assert err.startswith("workbench perf: error: failed to get model metadata: ")
        assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(("args", "message"), [
    (("--concurrency-range", "4:1"), "invalid range '4:1'"),
    (("--input-data", "/absent/data.json"), "neither 'random'"),
    (("-b", "65"), "expecting batch size <= 64 for model 'digits_mlp'"),
    (("--shape", "pixels"), "invalid --shape 'pixels'"),
])
def test_bad_values_are_one_line_and_status_1(digits_server, capsys, args, message) -> None:
    assert main(["perf", "-m", "digits_mlp", "-u", digits_server.url, *QUICK, *args]) == 1
    err = capsys.readouterr().err
    assert err.startswith("workbench perf: error: ") and message in err
    assert len(err.strip().splitlines()) == 1


def test_in_process_engine_through_the_cli(sample_repository: Path, tmp_path, capsys) -> None:
    report = tmp_path / "c_api.csv"
    status = main(["perf", "-m", "digits_mlp", "--service-kind=triton_c_api",
                   f"--model-repository={sample_repository}", "--concurrency-range", "2",
                   "-b", "4", "--input-data", "zero", *QUICK, "-f", str(report)])
    out = capsys.readouterr().out
    assert status == 0
    [row] = read_csv(report)
    assert row["Concurrency"] == "2" and float(row["Inferences/Second"]) > 0
    assert "Batch size: 4" in out and "Service Kind: in-process" in out
    assert SUMMARY.findall(out)[0][:2] == ("Concurrency", "2")
