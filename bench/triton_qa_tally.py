#!/usr/bin/env python3
"""Tally a run of Triton's upstream QA suites against the product (the harness in
../shared/compat/triton_qa/, results in <scratch>/results/<suite>/): passed / failed runnable
units per suite and overall, as docs/compatibility.md reports them.

A unit is one PASS/FAIL line of a suite's ``checks.txt`` (``HARNESS`` and ``RC<n>`` lines are not
units) or one case of a unittest / pytest log in the suite's folder (skipped cases are not
runnable). Where a suite was rerun in a variant the harness README describes (``X2.log``,
``X_onnx.log``), the variant replaces ``X.log``; per-test ``*.client.log`` / ``*.server.log`` files
are covered by ``checks.txt``.

:data:`NOT_RUNNABLE` lists the units that the harness README's own rule does not count (they need
a GPU, TensorRT, a model downloaded from the internet, or Triton CI's model inventory), each with
its reason; they are printed as "not runnable", never as passed.

usage: python3 bench/triton_qa_tally.py RESULTS_DIR [-v]   (-v: list failing and excluded units)
"""
from __future__ import annotations

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


def main(argv: list[str]) -> int:
    root = Path(next((a for a in argv if not a.startswith("-")), "/tmp/qa1/results"))
    verbose = "-v" in argv
    total_pass = total_fail = total_out = 0
    print(f"{'suite':24s} {'passed':>6s} / {'failed':<6s} {'rate':>7s}   not runnable")
    for suite in sorted(p for p in root.iterdir() if p.is_dir()):
        passed = failed = out = 0
        notes: list[str] = []
        for name, ok in suite_units(suite):
            why = _excluded(suite.name, name)
            if why is not None:
                out += 1
                notes.append(f"  (not runnable) {name}: {why}")
            elif ok:
                passed += 1
            else:
                failed += 1
                notes.append(f"  FAIL {name}")
        if passed + failed == 0:
            continue
        total_pass, total_fail, total_out = total_pass + passed, total_fail + failed, total_out + out
        print(f"{suite.name:24s} {passed:6d} / {failed:<6d} {100 * passed / (passed + failed):6.1f} %   {out}")
        if verbose:
            print("\n".join(notes))
    rate = 100 * total_pass / max(1, total_pass + total_fail)
    print(f"{'overall':24s} {total_pass:6d} / {total_fail:<6d} {rate:6.1f} %   {total_out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
