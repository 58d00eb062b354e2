"""compat harnesses (client side): a pytest plugin, loaded through ``PYTEST_PLUGINS=qa_pytest_record``,
that records every pytest case run into ``$QA_RESULTS`` as the JSON line sitecustomize.py writes for
plain unittest runs (pytest reports unittest cases itself, not through ``unittest.TestResult``, so the
two never count a case twice). A case whose subtests failed is one "fail" ("subtests_failed" counts
them): pytest reports each subtest on its own before the case's own report."""
from __future__ import annotations

import json
import os
import time

_failed_subtests: dict[str, list[str]] = {}  # nodeid -> messages of its failed subtests so far


def _write(record: dict) -> None:
    path = os.environ.get("QA_RESULTS")
    if not path:
        return
    try:
        with open(path, "a") as file:
            file.write(json.dumps(record) + "\n")
    except OSError:
        pass


def pytest_runtest_logreport(report):
    if type(report).__name__ == "SubtestReport":
        if report.failed:
            text = str(getattr(report, "longreprtext", "") or "")
            _failed_subtests.setdefault(report.nodeid, []).append(f"{report.head_line}: {text[-600:]}")
        return
    if not (report.when == "call" or (report.when == "setup" and not report.passed)):
        return
    subtests = _failed_subtests.pop(report.nodeid, [])
    message = ""
    if report.passed and not subtests:
        outcome = "pass"
    elif report.skipped:
        outcome = "skip"
        if isinstance(report.longrepr, tuple):  # (file, line, "Skipped: why")
            message = str(report.longrepr[2]).removeprefix("Skipped: ")
    else:
        outcome = "error" if report.when == "setup" else "fail"
        message = subtests[0] if report.passed else str(getattr(report, "longreprtext", "") or "")
    _write({"test": report.nodeid, "outcome": outcome, "msg": message[-1500:], "subtests_failed": len(subtests),
            "cwd": os.getcwd(), "runner": "pytest", "t": time.time()})
