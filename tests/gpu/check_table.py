"""The result table of ``tests/gpu/run_gpu_checks.sh``: one row per check, PASS / FAIL / SKIP.

Reads what the script left in its results folder (standard library only, so it runs even
when the project's environment is broken):

- ``setup.tsv``: rows the script wrote itself (``check<TAB>result<TAB>seconds<TAB>note``):
  environment, installs.
- ``steps.tsv``: one line per pytest step (``step<TAB>exit code<TAB>seconds<TAB>reason``;
  exit code 124 / 137 = stopped by ``timeout``; ``-`` = not run, for ``reason``).
- ``<step>.xml``: that step's JUnit XML (pytest ``--junitxml``).

Each check of :data:`CHECKS` selects the test cases of one module of one step (optionally
only names matching a pattern). A check FAILs when one of its cases failed or errored, or its
step died (timeout, crash) before reporting it; PASSes when at least one case passed; else it
is a SKIP with the first skip reason (e.g. "no CUDA GPU visible"). A test module skipped as a
whole counts for every check of that module. Modules of ``tests/gpu`` that no check names get
a row of their own. Exit status: 1 if any row FAILed, else 0.
"""

from __future__ import annotations

import argparse
import re
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Check:
    """One row: the test cases of ``module`` (a dotted module path) in the JUnit file of
    ``step`` whose names match ``pattern`` (a regex; empty = all)."""

    label: str
    step: str
    module: str
    pattern: str = ""


CHECKS = (
    Check("ORT CUDA EP", "gpu", "tests.gpu.test_ort_cuda_gpu", r"-cuda\]$"),
    Check("ORT TensorRT EP", "gpu", "tests.gpu.test_ort_cuda_gpu", r"-tensorrt\]$"),
    Check("PyTorch CUDA", "gpu", "tests.gpu.test_pytorch_cuda_gpu"),
    Check("TensorRT plan (minilm_encoder)", "gpu", "tests.gpu.test_tensorrt_gpu"),
    Check("NVML metrics + GPU memory", "gpu", "tests.gpu.test_nvml_metrics_gpu"),
    Check("DALI KIND_GPU + mixed decoding", "gpu", "tests.gpu.test_dali_gpu"),
    Check("CUDA shared memory", "cuda_shm", "tests.e2e.test_shared_memory_e2e", r"cuda_shared_memory"),
)


@dataclass(frozen=True)
class Row:
    check: str
    result: str
    seconds: float
    note: str


@dataclass(frozen=True)
class Case:
    module: str
    name: str
    outcome: str  # passed / failed / skipped
    seconds: float
    message: str
    whole_module: bool


def read_cases(path: Path) -> list[Case]:
    """Test cases of a pytest JUnit XML file (a module skipped or broken at collection is one
    case with an empty classname and the module as its name)."""
    cases = []
    for case in ET.parse(path).getroot().iter("testcase"):
        classname, name = case.get("classname", ""), case.get("name", "")
        whole = classname == ""
        module = name if whole else _module_of(classname)
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            element = case.find(tag)
            if element is not None:
                outcome = "skipped" if tag == "skipped" else "failed"
                message = _reason(element)
                break
        cases.append(Case(module, name, outcome, float(case.get("time", 0) or 0), message, whole))
    return cases


def _module_of(classname: str) -> str:
    """``tests.gpu.test_x.TestClass`` -> ``tests.gpu.test_x`` (modules are named ``test_*``)."""
    parts = classname.split(".")
    while len(parts) > 1 and not parts[-1].startswith("test_"):
        parts.pop()
    return ".".join(parts)


def _reason(element: ET.Element) -> str:
    text = element.get("message") or ""
    body = element.text or ""
    found = re.search(r"Skipped: ([^'\"]+)", body)  # a collection skip: ('file', line, 'Skipped: why')
    if found:
        text = found.group(1)
    elif body.strip() and (not text or text.startswith("collection ")):
        text = body.strip().splitlines()[-1]  # "collection failure": the error's last line
    return " ".join(text.split())


def check_row(check: Check, cases: list[Case] | None, step: tuple[str, float, str] | None) -> Row:
    """One check's row from its step's cases (None: no JUnit file) and the step's
    (exit code, seconds, reason not run)."""
    if step is not None and step[0] == "-":
        return Row(check.label, "SKIP", 0.0, step[2] or "step not run")
    mine = [c for c in cases or [] if c.module == check.module
            and (c.whole_module or not check.pattern or re.search(check.pattern, c.name))]
    seconds = round(sum(c.seconds for c in mine), 1)
    failed = [c for c in mine if c.outcome == "failed"]
    if failed:
        return Row(check.label, "FAIL", seconds, f"{len(failed)} failed: {_short(failed[0].message)}")
    if step is not None and step[0] in ("124", "137"):  # timeout's TERM / KILL
        return Row(check.label, "FAIL", seconds, f"step '{check.step}' timed out after {step[1]:.0f} s")
    passed = [c for c in mine if c.outcome == "passed"]
    skipped = [c for c in mine if c.outcome == "skipped"]
    if passed:
        extra = f", {len(skipped)} skipped ({_short(skipped[0].message)})" if skipped else ""
        return Row(check.label, "PASS", seconds, f"{len(passed)} passed{extra}")
    if skipped:
        return Row(check.label, "SKIP", seconds, _short(skipped[0].message))
    module_file = ROOT / (check.module.replace(".", "/") + ".py")
    if not module_file.exists():
        return Row(check.label, "SKIP", 0.0, f"{module_file.relative_to(ROOT)} is not in this checkout")
    code = step[0] if step is not None else "?"
    return Row(check.label, "FAIL", seconds, f"no test reported (pytest exit {code})")


def _short(text: str, limit: int = 90) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def table_rows(results: Path) -> list[Row]:
    """Every row: the script's own (setup.tsv), then one per check, then unlisted modules."""
    rows = []
    for line in _lines(results / "setup.tsv"):
        check, result, seconds, note = _split(line, 4)
        rows.append(Row(check, result, float(seconds or 0), note))
    steps = {}
    for line in _lines(results / "steps.tsv"):
        name, code, seconds, reason = _split(line, 4)
        steps[name] = (code, float(seconds or 0), reason)
    cases = {name: read_cases(results / f"{name}.xml") for name in steps
             if (results / f"{name}.xml").exists()}
    rows += [check_row(c, cases.get(c.step), steps.get(c.step)) for c in CHECKS]
    named = {c.module for c in CHECKS}
    for step, step_cases in cases.items():
        for module in sorted({c.module for c in step_cases} - named):
            rows.append(check_row(Check(module.rsplit(".", 1)[-1], step, module), step_cases,
                                  steps.get(step)))
    return rows


def _lines(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def _split(line: str, n: int) -> list[str]:
    fields = line.split("\t")
    return (fields + [""] * n)[:n]


def render(rows: list[Row]) -> str:
    """``check | result | seconds | note`` as an aligned text table."""
    header = Row("check", "result", 0.0, "note")
    width = max(len(r.check) for r in [header, *rows])
    lines = [f"{'check':<{width}} | result | seconds | note", f"{'-' * width}-|--------|---------|-----"]
    for row in rows:
        lines.append(f"{row.check:<{width}} | {row.result:<6} | {row.seconds:>7.1f} | {row.note}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, help="the script's results folder")
    args = parser.parse_args(argv)
    rows = table_rows(args.results)
    text = render(rows)
    (args.results / "table.txt").write_text(text + "\n")
    print(text)
    return 1 if any(row.result == "FAIL" for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
