"""compat harnesses (client side): a pytest plugin, loaded through ``PYTEST_PLUGINS=qa_pytest_record``,
that records every pytest case's outcome into ``$QA_RESULTS`` in the same JSON lines as
sitecustomize.py writes for plain unittest runs (pytest reports unittest cases itself, not through
``unittest.TestResult``, so the two never count a case twice)."""

from __future__ import annotations

import json
import os
import time


def pytest_runtest_logreport(report):
    path = os.environ.get("QA_RESULTS")
    if not path:
        return
    if report.when == "call" or (report.when == "setup" and not report.passed):
        if report.passed:
            outcome = "pass"
        elif report.skipped:
            outcome = "skip"
        else:
            outcome = "fail" if report.when == "call" else "error"
        message = ""
        if report.skipped and isinstance(report.longrepr, tuple):  # (file, line, "Skipped: why")
            message = str(report.longrepr[2]).removeprefix("Skipped: ")
        elif not report.passed:
            message = str(getattr(report, "longreprtext", "") or "")[-1500:]
        record = {
            "test": report.nodeid,
            "outcome": outcome,
            "msg": message,
            "cwd": os.getcwd(),
            "runner": "pytest",
            "t": time.time(),
        }
        try:
            with open(path, "a") as file:
                file.write(json.dumps(record) + "\n")
        except OSError:
            pass
