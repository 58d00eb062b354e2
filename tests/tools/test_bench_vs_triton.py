"""bench/vs_triton.py (issue 20's side-by-side runner): what it reads from perf_analyzer, how it pairs the
servers' numbers round by round into ratios and verdicts, and that it starts and stops a server process
group. Speed itself is never asserted (bench/RESULTS.md has the numbers)."""

from __future__ import annotations

import importlib.util
import os
import socket
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("vs_triton", ROOT / "bench" / "vs_triton.py")
assert _spec is not None and _spec.loader is not None
vs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(vs)

# a real perf_analyzer 2.41 run (workbench, mlp, gRPC, c=16, 3 windows of 2 s), trimmed to what is parsed
PA_LOG = """\
Request concurrency: 16
  Pass [1] throughput: 1999.18 infer/sec. p99 latency: 14041 usec
  Pass [2] throughput: 2132.23 infer/sec. p99 latency: 11135 usec
  Pass [3] throughput: 2083.07 infer/sec. p99 latency: 10885 usec
  Client:
    Request count: 14951
    Throughput: 2071.52 infer/sec
    p99 latency: 12605 usec
    Avg gRPC time: 7696 usec (marshal 5 usec + response wait 7690 usec + unmarshal 1 usec)
  Server:
    Inference count: 14958
    Execution count: 3629
    Successful request count: 14958
    Avg request latency: 2636 usec (overhead 139 usec + queue 1721 usec + compute input 70 usec + \
compute infer 630 usec + compute output 75 usec)
"""
PA_CSV = (",".join(["Concurrency", "Inferences/Second", "Client Send", "Network+Server Send/Recv", "Server Queue",
                    "Server Compute Input", "Server Compute Infer", "Server Compute Output", "Client Recv",
                    "p50 latency", "p90 latency", "p95 latency", "p99 latency", "request/response",
                    "response wait"])
          + "\n16,2071.52,5,5206,1721,70,630,75,1,7624,9809,10583,12605,6,7690\n")


def test_parse_pa_reads_throughput_latencies_breakdown_and_batch(tmp_path: Path) -> None:
    (tmp_path / "x.csv").write_text(PA_CSV)
    (tmp_path / "x.log").write_text(PA_LOG)
    got = vs.parse_pa(tmp_path / "x.csv", tmp_path / "x.log")
    assert got["infer_per_s"] == 2071.52
    assert (got["p50_ms"], got["p99_ms"]) == (7.624, 12.605)
    assert (got["queue_ms"], got["compute_input_ms"], got["compute_infer_ms"], got["compute_output_ms"]) == (
        1.721, 0.07, 0.63, 0.075)
    assert got["windows"] == [1999.18, 2132.23, 2083.07]
    assert got["avg_batch"] == pytest.approx(14958 / 3629)
    assert (got["avg_ms"], got["server_request_ms"], got["server_overhead_ms"]) == (7.696, 2.636, 0.139)


def test_parse_pa_of_a_failed_run_raises(tmp_path: Path) -> None:
    (tmp_path / "x.csv").write_text("")
    with pytest.raises(IndexError):
        vs.parse_pa(tmp_path / "x.csv", tmp_path / "x.log")


def test_pa_command_has_the_shared_harness_flags() -> None:
    http = vs.pa_command("mlp", "localhost:1", "http", 16, 3000, 3, Path("/o/x.csv"))
    joined = " ".join(http)
    for part in ("-m mlp", "-i http", "--input-tensor-format=binary", "--output-tensor-format=binary", "-b 1",
                 "--percentile 99", "--measurement-mode time_windows", "-s 999", "-r 3", "--concurrency-range 16",
                 "-p 3000", "-f /o/x.csv --verbose-csv -v", f"--input-data {vs.WORK / 'data' / 'mlp.json'}"):
        assert part in joined
    grpc = vs.pa_command("minilm", "localhost:2", "grpc", 4, 1000, 3)
    assert "-i grpc" in " ".join(grpc) and "-f" not in grpc and not any("tensor-format" in x for x in grpc)


def _m(server: str, model: str, tput: float | None, p99: float = 10.0, proto: str = "grpc") -> dict[str, Any]:
    if tput is None:
        return {"server": server, "model": model, "proto": proto, "conc": 16, "ok": False, "error": "rc 1: boom"}
    return {"server": server, "model": model, "proto": proto, "conc": 16, "ok": True, "infer_per_s": tput,
            "p99_ms": p99, "p50_ms": p99 / 2, "queue_ms": 1.0, "compute_input_ms": 0.1, "compute_infer_ms": 0.5,
            "compute_output_ms": 0.1, "avg_batch": 4.0, "avg_ms": 3.0, "server_request_ms": 2.0,
            "server_overhead_ms": 0.2}


def _results(rounds: list[list[dict[str, Any]]], raw_best: list[float] | None = None) -> dict[str, Any]:
    meta = {"start_utc": "2026-12-01 18:00:00", "end_utc": "2026-12-01 18:10:00", "machine": "2 vCPU",
            "windows": 3, "interval_ms": 3000, "ours_cmd": "workbench serve", "ours_code": "here"}
    out = []
    for i, ms in enumerate(rounds):
        rnd: dict[str, Any] = {"round": i + 1, "measurements": ms, "probe": {"mlp_b1": 45000.0}}
        if raw_best:
            rnd["raw_ort_minilm"] = {"per_batch": {"8": raw_best[i]}, "best_batch": 8, "best": raw_best[i]}
        out.append(rnd)
    return {"meta": meta, "rounds": out}


def _summary_row(md: str, model: str, proto: str = "gRPC") -> list[str]:
    section = md.split("### Summary")[1].split("###")[0]
    [line] = [ln for ln in section.splitlines() if ln.startswith(f"| {model} | {proto} |")]
    return [c.strip() for c in line.strip("|").split("|")]


def test_ratio_is_the_median_of_per_round_ratios_not_the_ratio_of_medians() -> None:
    # Triton 100, 200, 400 / workbench 150, 100, 360: ratios 1.5, 0.5, 0.9 -> median 0.90;
    # the ratio of the medians would be 150 / 200 = 0.75 (a drift between rounds would pair wrongly)
    res = _results([[_m("triton", "mlp", 100, 10), _m("workbench", "mlp", 150, 8)],
                    [_m("triton", "mlp", 200, 10), _m("workbench", "mlp", 100, 12)],
                    [_m("triton", "mlp", 400, 10), _m("workbench", "mlp", 360, 9)]])
    row = _summary_row(vs.tables(res), "mlp")
    assert row[3:9] == ["200", "150", "0.90", "10.00", "9.00", "0.90"]
    assert row[11] == "≥ 1.00× Triton: NOT met; p99 not worse: met"


def test_minilm_is_held_to_raw_onnxruntime_of_the_same_round_and_failures_are_shown() -> None:
    res = _results([[_m("triton", "minilm", 40.0), _m("workbench", "minilm", 44.0)],
                    [_m("triton", "minilm", 40.0), _m("workbench", "minilm", None)],
                    [_m("triton", "minilm", 40.0), _m("workbench", "minilm", 41.0)]],
                   raw_best=[44.0, 60.0, 50.0])
    md = vs.tables(res)
    row = _summary_row(md, "minilm")
    # workbench/raw per round: 1.0, (failed), 0.82 -> median 0.91; Triton ratio 1.10, 1.025 -> 1.06
    assert row[3:6] == ["40.0", "42.5", "1.06"]
    assert row[9:11] == ["50.0", "0.91"]
    assert row[11] == "≥ 1.00× Triton: met; ≥ 0.95× raw ORT: NOT met"
    assert "| 2 | 40.0 | FAILED |" in md
    assert "* round 2 workbench minilm grpc c=16: rc 1: boom" in md


def test_identity_target_and_no_verdict_off_the_target_concurrency() -> None:
    res = _results([[_m("triton", "identity", 1000), _m("workbench", "identity", 850)]])
    assert _summary_row(vs.tables(res), "identity")[11] == "≥ 0.80× Triton: met"
    for m in res["rounds"][0]["measurements"]:
        m["conc"] = 4
    assert _summary_row(vs.tables(res), "identity")[11] == "-"


def test_server_commands_load_the_same_models_on_the_right_repositories(tmp_path: Path) -> None:
    t = vs.server_command("triton", (1, 2, 3), ["mlp", "identity"], "X serve", tmp_path)
    assert f"--model-repository={vs.WORK / 'triton_py_repo'}" in t
    assert "--http-port=1 --grpc-address=127.0.0.1 --grpc-port=2" in t and "--metrics-port=3" in t
    w = vs.server_command("workbench", (4, 5, 6), ["mlp", "identity"], "X serve", tmp_path)
    assert w.startswith("X serve --model-repository=") and f"--model-repository={tmp_path}" in w
    for cmd in (t, w):
        assert cmd.endswith(" --model-control-mode=explicit --load-model=mlp --load-model=identity")
    assert str(tmp_path) not in vs.server_command("workbench", (4, 5, 6), ["mlp"], "X serve", tmp_path)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


READY_SERVER = textwrap.dedent("""
    import http.server, sys
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/v2/models/m/ready" else 404)
            self.end_headers()
        def log_message(self, *a):
            pass
    http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
""")


def test_server_waits_for_ready_and_stop_ends_the_whole_process_group(tmp_path: Path) -> None:
    port = _free_port()
    script = tmp_path / "ready.py"
    script.write_text(READY_SERVER)
    # a child in the background (as tritonserver's python-backend stubs are) must go with the group
    srv = vs.Server("fake", f"sleep 300 & {sys.executable} {script} {port}", port, ["m"], tmp_path / "log")
    srv.start(timeout_s=30)
    assert srv.proc is not None
    pgid = srv.proc.pid
    os.killpg(pgid, 0)  # the group is alive
    srv.stop()
    with pytest.raises(ProcessLookupError):
        os.killpg(pgid, 0)


def test_server_that_exits_early_fails_with_its_log_tail(tmp_path: Path) -> None:
    srv = vs.Server("fake", "echo no such model repository; exit 3", _free_port(), ["m"], tmp_path / "log")
    with pytest.raises(RuntimeError, match="no such model repository"):
        srv.start(timeout_s=30)
    assert srv.proc is None



def test_a_missing_shared_harness_stops_the_run_with_the_variable_to_set(monkeypatch, tmp_path: Path) -> None:
    """Without ../shared/bench (a clone elsewhere) the runner refuses at once, naming SHARED_BENCH, instead of
    measuring only one server and printing tables of FAILED cells."""
    monkeypatch.setattr(vs, "SHARED", tmp_path / "nowhere")
    with pytest.raises(SystemExit, match="SHARED_BENCH"):
        vs.ensure_harness()


def test_failed_starts_and_measurements_are_listed_for_the_exit_status() -> None:
    res = {"rounds": [
        {"round": 1, "triton_error": "tritonserver.sh: No such file\nmore", "measurements": [
            {"server": "workbench", "model": "mlp", "proto": "grpc", "conc": 16, "ok": True},
            {"server": "triton", "model": "mlp", "proto": "http", "conc": 16, "ok": False, "error": "not started"}]},
        {"round": 2, "measurements": []}]}
    assert vs.failures(res) == ["round 1 triton: tritonserver.sh: No such file",
                                "round 1 triton mlp http c=16: not started"]
    assert vs.failures({"rounds": [{"round": 1, "measurements": []}]}) == []


def test_server_cpu_per_inference_is_tabled_per_round_with_its_median() -> None:
    rounds = []
    for cpu_t, cpu_w in ((360.0, 150.0), (340.0, 130.0), (380.0, 170.0)):
        t, w = _m("triton", "mlp", 4000.0), _m("workbench", "mlp", 4000.0)
        t.update(cpu_us=cpu_t, busiest_thread_us=60.0)
        w.update(cpu_us=cpu_w, busiest_thread_us=cpu_w - 20)
        rounds.append([t, w])
    section = vs.tables(_results(rounds)).split("### Server CPU per inference")[1].split("###")[0]
    [line] = [ln for ln in section.splitlines() if ln.startswith("| mlp | gRPC | 16 | workbench |")]
    assert [c.strip() for c in line.strip("|").split("|")][4:] == ["150 / 130 / 170", "150", "130 / 110 / 150",
                                                                    "130"]


def test_group_cpu_reads_every_thread_of_the_process_group() -> None:
    cpu = vs.group_cpu(os.getpgrp())
    assert f"{os.getpid()}/{os.getpid()}" in cpu  # this process's main thread
    assert all(v >= 0.0 for v in cpu.values())
