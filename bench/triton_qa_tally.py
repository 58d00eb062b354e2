#!/usr/bin/env python3
"""Tally a run of Triton's upstream QA against the product: passed / failed runnable units per suite
and overall, and what is not runnable here with why, as docs/compatibility.md reports them.

ROOT is ``$COMPAT_OUT`` of ``make compat`` (compat/README.md), one folder per harness:

- ``protocol/results/<suite>/`` (compat/triton_qa): a unit is one PASS/FAIL line of the suite's
  ``checks.txt`` (``HARNESS`` and ``RC<n>`` lines are not units) or one case of a unittest / pytest
  log in its folder (skipped cases are not runnable). Where a suite was rerun in a variant
  (``X2.log``, ``X_onnx.log``), the variant replaces ``X.log``; per-test ``*.client.log`` /
  ``*.server.log`` files are covered by ``checks.txt``.
- ``scheduling/results/<suite>[.<variant>].jsonl`` (compat/scheduling) and
  ``python_backend/runs/<sub-suite>.results.jsonl`` (compat/python_backend): a unit is one recorded
  test case run (compat/pyhook: one JSON line per unittest or pytest case; a case run in several
  variants of its suite counts once per run); a skipped case is not runnable (the suite's own
  condition); a suite that exited non-zero (or was stopped by its time limit) with no failing case
  recorded counts one failed unit more (a server start or log check of its test.sh failed).
  ``suites.tsv`` beside them gives each suite's exit status and seconds (a suite stopped by its
  time limit, exit 124, is marked so). The python_backend examples are one unit per example client
  (``runs/examples.out``: the client ran and no "Failed to verify" followed).

A protocol results folder given directly (the layout before compat/ held the harnesses) is counted
as before. :data:`NOT_RUNNABLE`, :data:`NOT_RUNNABLE_SUITES`, :data:`NOT_RUNNABLE_UNITS` and
:data:`NOT_RUNNABLE_CHECKS` list what needs a GPU, TensorRT, conda, a source build, a model
downloaded from the internet, or Triton CI's model inventory, each with its reason; they are
printed as "not runnable", never as passed.

usage: python3 bench/triton_qa_tally.py ROOT [-v]   (-v: list failing and excluded units)
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

#: (suite, a regular expression searched in the unit's name, why it is not runnable here)
NOT_RUNNABLE: tuple[tuple[str, str, str], ...] = (
    ("L0_grpc", r"^grpc_client \(", "needs densenet_onnx, a model downloaded from the internet"),
    ("L0_grpc", r"^simple_grpc_model_control \(", "the 7-model run counts 8 models (densenet_onnx); "
     "the 8-model variant simple_grpc_model_control_8models is counted instead"),
    ("L0_grpc", r"TestGrpcAioClient\.test_get_model_repository_index$",
     "counts 8 models, densenet_onnx (downloaded) among them"),
    ("L0_grpc", r"TestGrpcAioClient\.test_register_cuda_shared_memory$",
     "expects the text of a GPU build's CUDA IPC call"),
    ("L0_server_status", r"ServerMetadataTest\.test_model_latest_infer$", "needs TensorRT plan_* models"),
    ("L0_server_status", r"ServerMetadataTest\.test_model_specific_infer$", "needs TensorRT plan_* models"),
    ("L0_server_status", r"ModelMetadataTest\.test_model_versions_added$", "needs TensorRT plan_* models"),
    ("L0_server_status", r"ModelMetadataTest\.test_infer_stats_no_model$",
     "counts Triton CI's model inventory (144 model statistics)"),
    ("L0_input_validation", r"::test_wrong_input_shape_tensor_size$", "needs TensorRT plan_* shape-tensor models"),
    ("L0_client_nobatch", r"^server start: .*bf16", "a BF16 ONNX model: ONNX Runtime has no BF16 CPU kernels "
     "(a CPU tritonserver fails the same way); the harness README drops BF16 models"),
    ("L0_server_status", r"^server start: .*bf16", "a BF16 ONNX model (as above); run_misc2.sh reruns without it"),
)


def _excluded(suite: str, unit: str) -> str | None:
    for name, part, why in NOT_RUNNABLE:
        if name == suite and re.search(part, unit):
            return why
    return None


def suite_units(suite: Path) -> list[tuple[str, bool]]:
    """(unit name, passed) of one suite's results folder, excluded units included."""
    units: list[tuple[str, bool]] = []
    checks = suite / "checks.txt"
    if checks.exists():
        for line in checks.read_text().splitlines():
            word, _, name = line.partition(" ")
            if word in ("PASS", "FAIL"):
                units.append((name, word == "PASS"))
    logs = sorted(p for p in suite.glob("*.log") if not p.name.endswith((".client.log", ".server.log")))
    stems = {p.stem for p in logs}
    for log in logs:
        if any(f"{log.stem}{variant}" in stems for variant in ("2", "_onnx")):
            continue
        units += _log_units(log)
    return units


def _log_units(log: Path) -> list[tuple[str, bool]]:
    text = log.read_text(errors="replace")
    if re.search(r"^Ran \d+ tests?", text, re.M):  # unittest -v
        cases = _unittest_cases(text, log.name)
        ran = sum(int(n) for n in re.findall(r"^Ran (\d+) tests?", text, re.M))
        skipped = sum(int(n) for n in re.findall(r"skipped=(\d+)", text))
        if len(cases) == ran - skipped:
            return cases
        return _unittest_summary(log, text)  # output interleaved beyond parsing: count only
    return [(f"{log.name}: {name}", status == "PASSED")
            for name, status in re.findall(r"^(\S+::\S+) (PASSED|FAILED|ERROR)", text, re.M)]


_STATUS = re.compile(r"(?:^|\.\.\. ?)(ok|FAIL|ERROR|skipped\b.*|expected failure|unexpected success)$")


def _unittest_cases(text: str, log_name: str) -> list[tuple[str, bool]]:
    """(case, passed) from unittest -v lines ``test_x (module.Class.test_x) ... ok``, also when
    the case printed output between its name and its status."""
    cases: list[tuple[str, bool]] = []
    current: str | None = None
    for line in text.splitlines():
        head = re.match(r"^(test\w*) \(([\w.]+)\)", line)
        if head:
            current = head.group(2)
        if current is None:
            continue
        status = _STATUS.search(line.rstrip())
        if status:
            word = status.group(1)
            if not word.startswith("skipped"):
                cases.append((f"{log_name}: {current}", word in ("ok", "expected failure")))
            current = None
    return cases


def _unittest_summary(log: Path, text: str) -> list[tuple[str, bool]]:
    ran = sum(int(n) for n in re.findall(r"^Ran (\d+) tests?", text, re.M))
    bad = [f"{log.name}: {where}" for where in re.findall(r"^(?:FAIL|ERROR): \w+ \(([^)]*)\)", text, re.M)]
    skipped = sum(int(n) for n in re.findall(r"skipped=(\d+)", text))
    good = ran - len(bad) - skipped
    return [(f"{log.name}: case {i}", True) for i in range(good)] + [(name, False) for name in bad]


#: L0_backend_python sub-suites and python_backend examples compat/python_backend does not run,
#: with why (their cases are never started, so they are listed, not counted)
NOT_RUNNABLE_SUITES: tuple[tuple[str, str], ...] = (
    ("L0_backend_python/env", "builds conda-pack environments (EXECUTION_ENV_PATH) with conda and CUDA "
     "Python versions downloaded at run time"),
    ("L0_backend_python/variants", "builds python_backend itself from source with cmake (a C++ build check)"),
)
#: units that cannot run here in a suite that runs (compat/python_backend leaves them out; the
#: scheduling suites' ones run and are listed whatever their outcome), with why
NOT_RUNNABLE_UNITS: tuple[tuple[str, str, str], ...] = (
    ("L0_backend_python/decoupled", "decoupled_test.py::DecoupledTest::test_decoupled_bls",
     "its model's response thread moves tensors to CUDA (without a GPU the client waits forever)"),
    ("L0_backend_python/io", "io_test.py::IOTest::test_ensemble_io", "moves tensors to CUDA (a GPU)"),
    ("L0_backend_python/io", "io_test.py::IOTest::test_empty_gpu_output", "a GPU output tensor (a GPU)"),
    ("L0_backend_python/io", "io_test.py::IOTest::test_variable_gpu_output", "a GPU output tensor (a GPU)"),
    ("L0_backend_python/io", "io_test.py::IOTest::test_requested_output_decoupled",
     "its model moves outputs to CUDA at random (without a GPU the client waits forever)"),
    ("L0_backend_python/toplevel", "python_test.py::PythonTest::test_gpu_tensor_error",
     "CUDA shared memory (a GPU)"),
    ("L0_backend_python/toplevel", "python_test.py::PythonTest::test_dlpack_tensor_error",
     "CUDA shared memory (a GPU)"),
    ("L0_lifecycle", "__main__.LifeCycleTest.test_load_same_model_different_platform",
     "checks the platforms of a TensorRT plan and a PyTorch model of one name (tensorrt_plan, pytorch_libtorch); "
     "the harness's plan_* / libtorch_* fixtures are ONNX copies (no TensorRT here)"),
    ("L0_lifecycle", "__main__.LifeCycleTest.test_model_reload_fail",
     "expects the CPU-only identity backend's 'GPU instances not supported' for a KIND_GPU instance, on a GPU "
     "machine; without a GPU Triton's core refuses KIND_GPU first ('has kind KIND_GPU but no GPUs are available')"),
    ("L0_lifecycle", "__main__.LifeCycleTest.test_load_gpu_limit",
     "--model-load-gpu-limit against Python models that allocate GPU memory with cuda-python (a GPU; "
     "workbench serve has no --model-load-gpu-limit either, docs/compatibility.md)"),
    ("python_backend examples", "instance_kind/client",
     "torchvision and resnet50 weights downloaded from the internet"),
)
#: checks a suite's test.sh makes outside its recorded cases that cannot run here: (suite, unit, the
#: line test.sh prints when the check fails, why). Listed with the suite; a non-zero exit of a suite
#: whose output has that line is accounted for by it (no "failed outside its recorded cases" unit)
NOT_RUNNABLE_CHECKS: tuple[tuple[str, str, str, str], ...] = (
    ("L0_batcher", "instance_queue_test", "*** Instance Queue Unit Test Failed",
     "Triton core's C++ unit-test binary of its InstanceQueue (waiting_consumer_count_ merge "
     "accounting), built from the core's sources with the server: needs a source build of Triton core"),
)
#: the example clients of L0_backend_python/examples/test.sh, in its order
EXAMPLES = ("add_sub/client", "pytorch/client", "jax/client", "bls/sync_client", "decoupled/repeat_client",
            "decoupled/square_client", "bls/async_client", "auto_complete/client", "bls_decoupled/sync_client",
            "bls_decoupled/async_client", "instance_kind/client", "custom_metrics/client")


class Row:
    """One suite's counts: passed, failed, not runnable (with why), and a note (exit status, time)."""

    def __init__(self, name: str) -> None:
        self.name, self.passed, self.failed, self.note = name, 0, 0, ""
        self.failing: list[str] = []
        self.excluded: list[tuple[str, str]] = []

    def add(self, unit: str, ok: bool) -> None:
        if ok:
            self.passed += 1
        else:
            self.failed += 1
            self.failing.append(unit)


def protocol_rows(root: Path) -> list[Row]:
    rows = []
    for suite in sorted(p for p in root.iterdir() if p.is_dir()):
        row = Row(suite.name)
        for name, ok in suite_units(suite):
            why = _excluded(suite.name, name)
            if why is not None:
                row.excluded.append((name, why))
            else:
                row.add(name, ok)
        if row.passed + row.failed:
            rows.append(row)
    return rows


def read_records(path: Path) -> list[dict]:
    """The JSON lines compat/pyhook wrote (a line cut short by a killed client is skipped)."""
    records = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            continue
    return records


def suite_status(folder: Path) -> dict[str, tuple[int, int]]:
    """suites.tsv: suite -> (exit status, seconds) of its last run."""
    status: dict[str, tuple[int, int]] = {}
    tsv = folder / "suites.tsv"
    if tsv.exists():
        for line in tsv.read_text().splitlines():
            parts = line.split("\t")
            if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
                status[parts[0]] = (int(parts[1]), int(parts[2]))
    return status


def _note(rc_seconds: tuple[int, int] | None) -> str:
    if rc_seconds is None:
        return ""
    rc, seconds = rc_seconds
    if rc in (124, 137):
        return f"stopped by its time limit ({seconds} s)"
    return f"exit {rc}, {seconds} s"


def record_rows(folder: Path, pattern: str, prefix: str) -> list[Row]:
    """Rows of a harness whose client recorded one JSON line per case (scheduling, python_backend);
    ``<suite>.<variant>`` files add to their suite's row."""
    status = suite_status(folder)
    rows: dict[str, Row] = {}
    tags = {p.name[: -len(pattern) + 1] for p in folder.glob("*" + pattern[1:])} | set(status)
    for tag in sorted(tags):
        if tag == "examples" and prefix:
            continue  # the examples are counted by example_row
        suite = prefix + tag.split(".")[0]
        row = rows.setdefault(suite, Row(suite))
        path = folder / (tag + pattern[1:])
        records = read_records(path) if path.exists() else []
        counted = failed = excused = 0  # excused: not-runnable cases that ran and failed
        for record in records:
            outcome, test = record.get("outcome"), str(record.get("test"))
            listed = next((w for s, u, w in NOT_RUNNABLE_UNITS if s == suite and u == test), None)
            if outcome == "subfail":
                continue
            if listed is not None:
                row.excluded.append((test, listed))
                excused += outcome in ("fail", "error")
            elif outcome == "skip":
                why = str(record.get("msg", ""))
                why = re.sub(r"^\(.*, \d+, 'Skipped: (.*)'\)$", r"\1", why)  # a pytest (file, line, text)
                row.excluded.append((test, "skipped by the suite's own condition: " + why[:120]))
            elif outcome == "harness-only":
                row.excluded.append((test, "expected file generated on a GPU machine (matches once instance_group "
                                           "is ignored)"))
            else:
                row.add(test, outcome == "pass")
                counted += 1
                failed += outcome != "pass"
        for check_suite, unit, marker, why in NOT_RUNNABLE_CHECKS:
            if check_suite == suite:
                if (unit, why) not in row.excluded:
                    row.excluded.append((unit, why))
                out = folder / (tag + ".out")  # the suite's output: did the check fail (exit non-zero)?
                excused += out.exists() and marker in out.read_text(errors="replace")
        rc = status.get(tag)
        if rc is not None and rc[0] != 0 and failed == 0 and excused == 0:
            # the suite failed where no case reports it: a server that should not start, a log check, a hang
            # (a not-runnable case that failed, e.g. a GPU case, accounts for a non-zero exit)
            what = "no case recorded" if counted == 0 else "test.sh failed outside its recorded cases"
            row.add(f"{tag}: {what} ({_note(rc)})", False)
        row.note = "; ".join(n for n in (row.note, _note(rc)) if n)
    return list(rows.values())


def example_row(out: Path) -> Row | None:
    """python_backend examples from L0_backend_python/examples' output (bash -x): an example passes
    when its client ran and no "Failed to verify" line followed before the next example's section
    (test.sh sets ``CLIENT_LOG`` first in each: a section whose client never runs, instance_kind's
    here, reports its own "Failed to verify ..." line, which is not the previous client's)."""
    if not out.exists():
        return None
    row = Row("python_backend examples")
    ran: dict[str, bool] = {}
    current = None
    for line in out.read_text(errors="replace").splitlines():
        started = re.match(r"^\++ python3 examples/(\S+)\.py", line)
        if started:
            current = started.group(1)
            ran[current] = True
        elif re.match(r"^\++ CLIENT_LOG=", line):
            current = None  # the next example's section
        elif current and not line.startswith("+") and "Failed to verify" in line:
            ran[current] = False
    for example in EXAMPLES:
        why = next((w for s, u, w in NOT_RUNNABLE_UNITS if s == row.name and u == example), None)
        if why is not None:
            row.excluded.append((example, why))
        else:
            row.add(example if example in ran else f"{example} (never ran)", ran.get(example, False))
    return row


def combined_rows(root: Path) -> list[tuple[str, list[Row]]]:
    sections: list[tuple[str, list[Row]]] = []
    if (root / "protocol" / "results").is_dir():
        sections.append(("protocol (compat/triton_qa)", protocol_rows(root / "protocol" / "results")))
    if (root / "scheduling" / "results").is_dir():
        sections.append(("scheduling (compat/scheduling)", record_rows(root / "scheduling" / "results", "*.jsonl", "")))
    runs = root / "python_backend" / "runs"
    if runs.is_dir():
        rows = record_rows(runs, "*.results.jsonl", "L0_backend_python/")
        for suite, unit, why in NOT_RUNNABLE_UNITS:  # the listed units the harness does not run
            row = next((r for r in rows if r.name == suite), None)
            if row is not None and (unit, why) not in row.excluded:
                row.excluded.append((unit, why))
        for suite, why in NOT_RUNNABLE_SUITES:
            row = Row(suite)
            row.excluded.append(("(the whole sub-suite)", why))
            rows.append(row)
        examples = example_row(runs / "examples.out")
        if examples is not None:
            rows.append(examples)
        sections.append(("Python backend (compat/python_backend)", rows))
    return sections


def print_table(sections: list[tuple[str, list[Row]]], verbose: bool) -> None:
    print(f"{'suite':40s} {'passed':>6s} / {'failed':<6s} {'rate':>7s}  {'not runnable':>12s}  note")
    total_pass = total_fail = total_out = 0
    reasons: dict[str, int] = {}
    for title, rows in sections:
        if title != "protocol":  # the combined layout: one block per harness
            print(f"-- {title}")
        for row in rows:
            total_pass, total_fail = total_pass + row.passed, total_fail + row.failed
            total_out += len(row.excluded)
            runnable = row.passed + row.failed
            rate = f"{100 * row.passed / runnable:6.1f} %" if runnable else "      -"
            print(f"{row.name:40s} {row.passed:6d} / {row.failed:<6d} {rate}  {len(row.excluded):12d}  {row.note}")
            for _, why in row.excluded:
                key = f"{row.name}: {why}"
                reasons[key] = reasons.get(key, 0) + 1
            if verbose:
                for unit in row.failing:
                    print(f"  FAIL {unit}")
                for unit, why in row.excluded:
                    print(f"  (not runnable) {unit}: {why}")
    overall = 100 * total_pass / max(1, total_pass + total_fail)
    print(f"{'overall':40s} {total_pass:6d} / {total_fail:<6d} {overall:6.1f} %  {total_out:12d}")
    if reasons and not verbose:
        print("not runnable here:")
        for key, count in reasons.items():
            print(f"  {count:3d}  {key}")


def main(argv: list[str]) -> int:
    root = Path(next((a for a in argv if not a.startswith("-")), "/tmp/workbench-compat"))
    verbose = "-v" in argv
    sections = combined_rows(root)
    if not sections:  # a protocol results folder given directly
        sections = [("protocol", protocol_rows(root))]
    print_table(sections, verbose)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
