"""The upstream-QA harnesses in compat/ (triton_qa, scheduling, python_backend; `make compat`) and the
tally that counts their runs (bench/triton_qa_tally.py). The harnesses themselves run for hours against
upstream code fetched at run time, so here: every script parses, none depends on a path of one machine,
and the tally reads a recorded sample of each harness's results (written below, not upstream output)."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
COMPAT = ROOT / "compat"
HARNESSES = ("triton_qa", "scheduling", "python_backend")
_spec = importlib.util.spec_from_file_location("triton_qa_tally", ROOT / "bench" / "triton_qa_tally.py")
assert _spec is not None and _spec.loader is not None
tally = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tally)


def _scripts(kind: str) -> list[Path]:
    """compat/'s bash (kind "bash") or Python (kind "python") files, by extension or first line."""
    found = []
    for path in sorted(COMPAT.rglob("*")):
        if not path.is_file() or "__pycache__" in path.parts:
            continue
        first = path.read_text(errors="replace").split("\n", 1)[0]
        is_bash = path.suffix == ".sh" or (first.startswith("#!") and "bash" in first)
        is_python = path.suffix == ".py" or (first.startswith("#!") and "python" in first)
        if (kind == "bash" and is_bash) or (kind == "python" and is_python):
            found.append(path)
    return found


def test_every_harness_has_one_entry_script_and_a_make_target():
    makefile = (ROOT / "Makefile").read_text()
    for harness in HARNESSES:
        assert (COMPAT / harness / "run.sh").is_file()
        assert f"bash compat/{harness}/run.sh" in makefile
    assert re.search(r"^compat: compat-protocol compat-scheduling compat-python-backend$", makefile, re.M)


@pytest.mark.parametrize("script", _scripts("bash"), ids=lambda p: str(p.relative_to(COMPAT)))
def test_bash_scripts_parse(script: Path):
    result = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("script", _scripts("python"), ids=lambda p: str(p.relative_to(COMPAT)))
def test_python_scripts_compile(script: Path):
    compile(script.read_text(), str(script), "exec")


def test_no_script_depends_on_one_machine():
    """No harness file names the shared folder of one session (it is lost after it) or a fixed
    /work or /tmp path; /tmp appears only as the default of ${TMPDIR:-/tmp}."""
    files = [p for p in COMPAT.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    for path in files:
        assert "/work/shared" not in path.read_text(errors="replace"), path
    own = [p for p in files if p.parts[len(COMPAT.parts)] in (*HARNESSES, "lib.sh", "pyhook", "README.md")]
    for path in own:
        text = path.read_text(errors="replace")
        assert not re.search(r"(^|[\s\"'=:(])/work/", text, re.M), path
        assert not re.search(r"(^|[\s\"'=:(])/tmp\b", text.replace("${TMPDIR:-/tmp}", ""), re.M), path


def test_upstream_sources_come_from_the_environment_or_the_cache(tmp_path: Path):
    """compat/lib.sh: SERVER_GIT (a bare git dir) wins; unset, the bare clone in UPSTREAM_CACHE is used
    (made there on first use with `git clone --bare https://github.com/triton-inference-server/<repo>`)."""
    cached = tmp_path / "cache" / "server.git"
    subprocess.run(["git", "init", "-q", "--bare", str(cached)], check=True, timeout=30)
    script = f'source {COMPAT / "lib.sh"}; upstream_git SERVER_GIT server'
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "UPSTREAM_CACHE": str(tmp_path / "cache")}
    from_cache = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=30)
    assert from_cache.stdout.strip() == str(cached), from_cache.stderr
    given = subprocess.run(["bash", "-c", script], env={**env, "SERVER_GIT": "/somewhere/server.git"},
                           capture_output=True, text=True, timeout=30)
    assert given.stdout.strip() == "/somewhere/server.git"
    default = subprocess.run(["bash", "-c", f'source {COMPAT / "lib.sh"}; echo "$UPSTREAM_CACHE $COMPAT_OUT"'],
                             env={"PATH": "/usr/bin:/bin", "HOME": "/home/u"}, capture_output=True, text=True,
                             timeout=30)
    assert default.stdout.split() == ["/home/u/.cache/workbench/upstream", "/tmp/workbench-compat"]


def test_unsafe_bits_stay_scoped():
    """The edits that keep upstream's scripts safe on a shared machine are in place: the stub lookup
    is scoped to the suite's server, and kill_server never runs `kill 0`."""
    setup = (COMPAT / "python_backend" / "setup.sh").read_text()
    assert 'pgrep --parent $SERVER_PID -f "backends/python/stub.py"' in setup
    assert 'if [ "${SERVER_PID:-0}" != "0" ]; then kill $SERVER_PID' in setup
    for path in _scripts("bash"):
        code = "\n".join(line for line in path.read_text().splitlines() if not line.lstrip().startswith("#"))
        assert not re.search(r"\b(pkill|killall)\b", code), path


SAMPLE_CASES = """\
import unittest


class Sample(unittest.TestCase):
    def test_ok(self):
        pass

    def test_fail(self):
        self.fail("wrong answer")

    def test_subtests(self):
        for i in range(3):
            with self.subTest(i=i):
                self.assertNotEqual(i, 1)

    @unittest.skip("needs a GPU")
    def test_skipped(self):
        pass


if __name__ == "__main__":
    unittest.main()
"""


@pytest.mark.parametrize("runner", ["unittest", "pytest"])
def test_recorders_write_one_line_per_case_run(tmp_path: Path, runner: str):
    """compat/pyhook records each case of a real unittest or pytest run once, a case whose subtest
    failed as one failure (the tally's units), a skip with its reason."""
    (tmp_path / "sample_cases.py").write_text(SAMPLE_CASES)
    results = tmp_path / "results.jsonl"
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(COMPAT / "pyhook"), "QA_RESULTS": str(results),
           "PYTHONDONTWRITEBYTECODE": "1"}
    if runner == "pytest":
        env["PYTEST_PLUGINS"] = "qa_pytest_record"
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "sample_cases.py"]
    else:
        command = [sys.executable, "-m", "unittest", "-v", "sample_cases"]
    subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, timeout=120)
    records = [json.loads(line) for line in results.read_text().splitlines()]
    outcomes = {r["test"].replace("::", ".").rsplit(".", 1)[-1]: r for r in records}
    assert len(records) == 4, records
    assert {name: r["outcome"] for name, r in outcomes.items()} == {
        "test_ok": "pass", "test_fail": "fail", "test_subtests": "fail", "test_skipped": "skip"}
    assert outcomes["test_subtests"]["subtests_failed"] == 1
    assert "i=1" in outcomes["test_subtests"]["msg"]
    assert "wrong answer" in outcomes["test_fail"]["msg"]
    assert outcomes["test_skipped"]["msg"] == "needs a GPU"


def _write_sample(root: Path) -> None:
    """A small recorded run of each harness, in the layout each one writes."""
    shm = root / "protocol" / "results" / "L0_shared_memory"
    shm.mkdir(parents=True)
    (shm / "checks.txt").write_text("PASS SharedMemoryTest.test_a.http\nFAIL SharedMemoryTest.test_b.grpc\nRC0 x\n")
    server_status = root / "protocol" / "results" / "L0_server_status"
    server_status.mkdir()
    (server_status / "server_status_test.log").write_text(
        "test_model_latest_infer (server_status_test.ServerMetadataTest.test_model_latest_infer) ... ok\n"
        "test_x (server_status_test.ServerMetadataTest.test_x) ... ok\n"
        "----------------------------------------------------------------------\nRan 2 tests in 1.0s\n\nOK\n")
    sched = root / "scheduling" / "results"
    sched.mkdir(parents=True)
    records = [("SequenceBatcherTest.test_a", "pass"), ("SequenceBatcherTest.test_b", "fail"),
               ("SequenceBatcherTest.test_a", "pass"), ("SequenceBatcherTest.test_c", "skip"),
               ("SequenceBatcherTest.test_b", "subfail")]
    (sched / "L0_sequence_batcher.jsonl").write_text(
        "".join(json.dumps({"test": t, "outcome": o, "msg": ""}) + "\n" for t, o in records) + '{"test": "cut')
    (sched / "L0_lifecycle.jsonl").write_text(json.dumps({"test": "LifeCycleTest.test_x", "outcome": "pass"}) + "\n")
    (sched / "suites.tsv").write_text("L0_sequence_batcher\t1\t300\nL0_lifecycle\t124\t3000\n")
    runs = root / "python_backend" / "runs"
    runs.mkdir(parents=True)
    (runs / "io.results.jsonl").write_text(
        json.dumps({"test": "io_test.py::IOTest::test_requested_output_default", "outcome": "pass"}) + "\n"
        + json.dumps({"test": "io_test.py::IOTest::test_x", "outcome": "skip",
                      "msg": "('/q/io_test.py', 12, 'Skipped: no GPU here')"}) + "\n")
    (runs / "examples.out").write_text(
        "+ python3 examples/add_sub/client.py\nPASS: add_sub\n"
        "+ python3 examples/pytorch/client.py\n+ '[' 1 -ne 0 ']'\n"
        "+ echo -e '\\n***\\n*** Failed to verify pytorch example.'\n"
        "***\n*** Failed to verify pytorch example. \n***\n"
        "+ python3 examples/jax/client.py\n")
    (runs / "toplevel.results.jsonl").write_text(
        json.dumps({"test": "python_test.py::PythonTest::test_gpu_tensor_error", "outcome": "fail"}) + "\n"
        + json.dumps({"test": "python_test.py::PythonTest::test_bf16", "outcome": "fail"}) + "\n")
    (runs / "suites.tsv").write_text("io\t0\t54\nlogging\t1\t20\nexamples\t1\t400\ntoplevel\t1\t300\n")


def test_tally_counts_a_recorded_run_of_each_harness(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    _write_sample(tmp_path)
    rows = {row.name: row for _, section in tally.combined_rows(tmp_path) for row in section}
    assert (rows["L0_shared_memory"].passed, rows["L0_shared_memory"].failed) == (1, 1)
    # a TensorRT case of L0_server_status is not runnable, never passed
    assert (rows["L0_server_status"].passed, len(rows["L0_server_status"].excluded)) == (1, 1)
    # one unit per case run (a case of two variants twice), skips not runnable, subtests and a cut line not counted
    batcher = rows["L0_sequence_batcher"]
    assert (batcher.passed, batcher.failed, len(batcher.excluded)) == (2, 1, 1)
    assert batcher.note == "exit 1, 300 s"
    # all its recorded cases passed, but the suite was stopped by its time limit: one failed unit more
    lifecycle = rows["L0_lifecycle"]
    assert (lifecycle.passed, lifecycle.failed) == (1, 1)
    assert lifecycle.note == "stopped by its time limit (3000 s)"
    assert lifecycle.failing == [
        "L0_lifecycle: test.sh failed outside its recorded cases (stopped by its time limit (3000 s))"]
    # io: its GPU cases listed as not runnable; logging failed before recording a case: one failed unit
    io = rows["L0_backend_python/io"]
    assert (io.passed, io.failed, len(io.excluded)) == (1, 0, 5)
    assert ("io_test.py::IOTest::test_x", "skipped by the suite's own condition: no GPU here") in io.excluded
    logging = rows["L0_backend_python/logging"]
    assert (logging.passed, logging.failed) == (0, 1)
    assert "no case recorded (exit 1, 20 s)" in logging.failing[0]
    # a case that ran but needs a GPU is not runnable, never failed; one listed but not run is listed once
    toplevel = rows["L0_backend_python/toplevel"]
    assert (toplevel.passed, toplevel.failed, toplevel.failing) == (0, 1, ["python_test.py::PythonTest::test_bf16"])
    assert len(toplevel.excluded) == 2
    assert rows["L0_backend_python/env"].excluded[0][1].startswith("builds conda-pack environments")
    examples = rows["python_backend examples"]
    # add_sub and jax passed, pytorch failed, 8 never ran (the suite stopped), instance_kind not runnable
    assert (examples.passed, examples.failed, len(examples.excluded)) == (2, 9, 1)
    assert "pytorch/client" in examples.failing
    assert "L0_backend_python/examples" not in rows

    tally.main([str(tmp_path)])
    out = capsys.readouterr().out
    assert re.search(r"^L0_sequence_batcher\s+2 / 1\s+66\.7 %\s+1\s+exit 1, 300 s$", out, re.M)
    assert re.search(r"^overall\s+8 / 14\b", out, re.M)
    assert "L0_backend_python/variants: builds python_backend itself from source" in out


def test_tally_reads_a_protocol_results_folder_given_directly(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    _write_sample(tmp_path)
    tally.main([str(tmp_path / "protocol" / "results")])
    out = capsys.readouterr().out
    assert re.search(r"^L0_shared_memory\s+1 / 1\b", out, re.M)
    assert "-- " not in out


def test_an_example_section_whose_client_never_runs_fails_no_other_example(tmp_path: Path):
    """instance_kind is not run here: its section's "Failed to verify ..." line was counted against
    the client before it (bls_decoupled/async_client, which had printed PASS)."""
    out = tmp_path / "examples.out"
    out.write_text("\n".join([
        "+ CLIENT_LOG=../examples_bls_decoupled_async_client.log",
        "+ python3 examples/bls_decoupled/async_client.py",
        "+ grep PASS ../examples_bls_decoupled_async_client.log",
        "PASS: BLS Decoupled Async",
        "+ CLIENT_LOG=../examples_model_instance_kind.log",
        "+ echo -e '\\n***\\n*** Failed to verify Model Instance Kind example after 3 attempt(s). \\n***'",
        "*** Failed to verify Model Instance Kind example after 3 attempt(s). ",
        "+ CLIENT_LOG=../examples_custom_metrics_client.log",
        "+ python3 examples/custom_metrics/client.py",
        "*** Failed to verify Custom Metrics example. ",
    ]) + "\n")
    row = tally.example_row(out)
    assert row is not None
    assert "bls_decoupled/async_client" not in row.failing
    assert "custom_metrics/client" in row.failing


def test_a_non_zero_exit_from_a_failed_gpu_case_is_no_failed_unit(tmp_path: Path) -> None:
    """toplevel's python_test.py exits 1 when only its CUDA-shared-memory cases (not runnable)
    fail; before, that exit counted as one more failed unit ("failed outside its recorded cases")."""
    _write_sample(tmp_path)
    runs = tmp_path / "python_backend" / "runs"
    (runs / "toplevel.results.jsonl").write_text(
        json.dumps({"test": "python_test.py::PythonTest::test_gpu_tensor_error", "outcome": "fail"}) + "\n"
        + json.dumps({"test": "python_test.py::PythonTest::test_growth_error", "outcome": "pass"}) + "\n")
    rows = {row.name: row for _, section in tally.combined_rows(tmp_path) for row in section}
    toplevel = rows["L0_backend_python/toplevel"]
    assert (toplevel.passed, toplevel.failed, len(toplevel.excluded)) == (1, 0, 2)


def test_l0_batchers_instance_queue_test_is_listed_not_runnable_and_its_exit_no_failed_unit(tmp_path: Path) -> None:
    """L0_batcher's test.sh ends with Triton core's C++ ``instance_queue_test`` binary (a source
    build of the core): missing here, it makes the suite exit 1 with every recorded case passed,
    which counted as one failed unit ("failed outside its recorded cases") and was not listed."""
    sched = tmp_path / "scheduling" / "results"
    sched.mkdir(parents=True)
    (sched / "L0_batcher.jsonl").write_text(json.dumps({"test": "BatcherTest.test_a", "outcome": "pass"}) + "\n")
    (sched / "L0_batcher.out").write_text(
        "test.sh: line 845: ./instance_queue_test: No such file or directory\n\n***\n"
        "*** Instance Queue Unit Test Failed\n***\n")
    (sched / "suites.tsv").write_text("L0_batcher\t1\t435\n")
    batcher = {row.name: row for _, section in tally.combined_rows(tmp_path) for row in section}["L0_batcher"]
    assert (batcher.passed, batcher.failed) == (1, 0)
    assert [unit for unit, _ in batcher.excluded] == ["instance_queue_test"]
    assert "source build of Triton core" in batcher.excluded[0][1]
    # another failure of test.sh (no instance_queue_test line) still counts
    (sched / "L0_batcher.out").write_text("*** Test FAILED\n")
    batcher = {row.name: row for _, section in tally.combined_rows(tmp_path) for row in section}["L0_batcher"]
    assert (batcher.passed, batcher.failed) == (1, 1)
