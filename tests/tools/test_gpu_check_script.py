"""tests/gpu/run_gpu_checks.sh on a machine without a GPU, and its result table.

The script runs end to end here without installing anything (``--no-setup``, this
interpreter): every GPU check must come out SKIP with its reason, and the exit status 0.
The table logic (tests/gpu/check_table.py) is checked on JUnit files in pytest's format for
the outcomes a CPU machine never produces: failures, timeouts, a passing GPU module.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from workbench.gpu.devices import gpu_count

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "gpu" / "run_gpu_checks.sh"
INSTALL_ROWS = ("onnxruntime-gpu", "nvidia-ml-py", "cuda-python", "tensorrt-cu12", "torch CUDA build")


def load_check_table():
    spec = importlib.util.spec_from_file_location("check_table", ROOT / "tests" / "gpu" / "check_table.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


check_table = load_check_table()


def parse_table(text: str) -> dict[str, tuple[str, str]]:
    """check -> (result, note) from the printed table."""
    rows = {}
    for line in text.splitlines()[2:]:
        check, result, _seconds, note = (cell.strip() for cell in line.split("|", 3))
        rows[check] = (result, note)
    return rows


@pytest.mark.skipif(gpu_count() > 0, reason="a GPU is present: the script would run the real GPU checks")
def test_script_reports_every_gpu_check_as_skip_without_a_gpu(tmp_path: Path) -> None:
    env = dict(os.environ, GPU_CHECKS_PYTHON=sys.executable, GPU_CHECKS_BUDGET_S="120")
    done = subprocess.run(["bash", str(SCRIPT), "--no-setup", "--results", str(tmp_path)],
                          capture_output=True, text=True, timeout=150, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = parse_table((tmp_path / "table.txt").read_text())
    assert rows == parse_table(done.stdout[done.stdout.index("check "):])  # printed = saved
    assert rows.pop("python environment")[0] == "PASS"
    expected = [*INSTALL_ROWS, *(c.label for c in check_table.CHECKS)]
    assert list(rows) == expected
    assert {result for result, _ in rows.values()} == {"SKIP"}, rows
    for label in INSTALL_ROWS:
        assert rows[label][1] == "no GPU: not checked"
    for label in ("ORT CUDA EP", "ORT TensorRT EP", "PyTorch CUDA", "NVML metrics + GPU memory"):
        assert rows[label][1] == "no CUDA GPU visible (the CUDA driver reports 0 devices)", label
    assert rows["CUDA shared memory"][1] == "no GPU"
    for step in ("gpu", "cuda_shm"):  # the junit files the table was read from
        assert (tmp_path / f"{step}.xml").stat().st_size > 0


def junit(*cases: str) -> str:
    return ('<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">'
            + "".join(cases) + "</testsuite></testsuites>")


def case(module: str, name: str, body: str = "", time: float = 1.5) -> str:
    return f'<testcase classname="{module}" name="{name}" time="{time}">{body}</testcase>'


def write_results(folder: Path, steps: dict[str, tuple[str, str]]) -> Path:
    """``steps``: step -> (exit code, JUnit XML or "" for none)."""
    lines = []
    for step, (code, xml) in steps.items():
        lines.append(f"{step}\t{code}\t12\t")
        if xml:
            (folder / f"{step}.xml").write_text(xml)
    (folder / "steps.tsv").write_text("\n".join(lines) + "\n")
    (folder / "setup.tsv").write_text("make setup\tPASS\t30\tready\n")
    return folder


def test_table_fails_on_a_failure_and_passes_a_passing_module(tmp_path: Path) -> None:
    ort, torch = "tests.gpu.test_ort_cuda_gpu", "tests.gpu.test_pytorch_cuda_gpu"
    gpu = junit(
        case(ort, "test_gpu_instance_answers_like_cpu[digits_mlp-cuda]"),
        case(ort, "test_gpu_instance_answers_like_cpu[digits_mlp-tensorrt]",
             '<failure message="AssertionError: Not equal to tolerance">...</failure>'),
        case(torch, "test_kind_gpu_answers_like_cpu_and_reports_its_weights"),
        case("tests.gpu.test_new_gpu_thing", "test_x", '<skipped message="needs two GPUs" />'),
        case("", "tests.gpu.test_nvml_metrics_gpu",
             "<skipped message=\"collection skipped\">('gpu_support.py', 32, "
             "'Skipped: pynvml does not import: No module named pynvml')</skipped>", 0),
    )
    write_results(tmp_path, {"gpu": ("1", gpu), "cuda_shm": ("124", "")})
    rows = {row.check: row for row in check_table.table_rows(tmp_path)}
    assert (rows["make setup"].result, rows["make setup"].seconds) == ("PASS", 30.0)
    assert (rows["ORT CUDA EP"].result, rows["ORT CUDA EP"].seconds) == ("PASS", 1.5)
    assert rows["ORT TensorRT EP"].result == "FAIL"
    assert "Not equal to tolerance" in rows["ORT TensorRT EP"].note
    assert rows["PyTorch CUDA"].result == "PASS"
    assert rows["NVML metrics + GPU memory"] == check_table.Row(
        "NVML metrics + GPU memory", "SKIP", 0.0, "pynvml does not import: No module named pynvml")
    assert rows["CUDA shared memory"].result == "FAIL"
    assert "timed out" in rows["CUDA shared memory"].note
    assert rows["test_new_gpu_thing"].result == "SKIP"  # a module no check names: its own row
    assert check_table.main([str(tmp_path)]) == 1
    assert "ORT TensorRT EP" in (tmp_path / "table.txt").read_text()


def test_table_without_failures_exits_zero(tmp_path: Path) -> None:
    passing = junit(case("tests.e2e.test_shared_memory_e2e", "test_cuda_shared_memory_round_trip"))
    write_results(tmp_path, {"cuda_shm": ("0", passing)})
    (tmp_path / "steps.tsv").write_text("gpu\t-\t0\tno usable Python environment\ncuda_shm\t0\t5\t\n")
    rows = {row.check: row for row in check_table.table_rows(tmp_path)}
    assert rows["CUDA shared memory"].result == "PASS"
    assert rows["PyTorch CUDA"] == check_table.Row("PyTorch CUDA", "SKIP", 0.0, "no usable Python environment")
    assert check_table.main([str(tmp_path)]) == 0


def test_script_installs_what_the_gpu_extra_lists() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["gpu"]
    script = SCRIPT.read_text()
    for requirement in extra:
        name = requirement.split(">")[0].split("=")[0].split("<")[0]
        assert f'"{name}' in script or f'"{requirement}"' in script, requirement
