# compat harnesses (client side, on PYTHONPATH): record every unittest outcome into $QA_RESULTS
# (one JSON line per case: test id, outcome pass|fail|error|skip|subfail, message, cwd, the
# environment that tells the variant of a case apart). Cases run by pytest are recorded by
# qa_pytest_record.py instead (pytest does not report through unittest.TestResult).
import os

if os.environ.get("QA_RESULTS"):
    import json
    import time
    import traceback
    import unittest.result as _r

    _path = os.environ["QA_RESULTS"]

    def _rec(test, outcome, err=None):
        msg = ""
        if err is not None:
            try:
                msg = "".join(traceback.format_exception_only(err[0], err[1])).strip()
                if err[2] is not None:
                    fr = [
                        f
                        for f in traceback.extract_tb(err[2])
                        if "/qa/" in f.filename or "/python_backend/" in f.filename
                    ]
                    if fr:
                        msg += "  @" + ";".join(f"{f.filename.split('/')[-1]}:{f.lineno}" for f in fr[-3:])
            except Exception:  # noqa: BLE001 (a record must never break the test run)
                msg = str(err)
        try:
            with open(_path, "a") as f:
                f.write(
                    json.dumps(
                        {
                            "test": test.id(),
                            "outcome": outcome,
                            "msg": msg[-1500:],
                            "cwd": os.getcwd(),
                            "argv": __import__("sys").argv[0],
                            "env_delay": os.environ.get("TRITONSERVER_DELAY_SCHEDULER"),
                            "bt": os.environ.get("BATCHER_TYPE"),
                            "trial": os.environ.get("MODEL_INSTANCES"),
                            "nobatch": os.environ.get("NO_BATCHING"),
                            "t": time.time(),
                        }
                    )
                    + "\n"
                )
        except Exception:  # noqa: BLE001 (a record must never break the test run)
            pass

    _orig = {
        n: getattr(_r.TestResult, n)
        for n in (
            "addSuccess",
            "addFailure",
            "addError",
            "addSkip",
            "addExpectedFailure",
            "addUnexpectedSuccess",
            "addSubTest",
        )
    }

    def addSuccess(self, test):
        _rec(test, "pass")
        return _orig["addSuccess"](self, test)

    def addFailure(self, test, err):
        _rec(test, "fail", err)
        return _orig["addFailure"](self, test, err)

    def addError(self, test, err):
        _rec(test, "error", err)
        return _orig["addError"](self, test, err)

    def addSkip(self, test, reason):
        _rec(test, "skip", (Exception, Exception(reason), None))
        return _orig["addSkip"](self, test, reason)

    def addSubTest(self, test, subtest, err):
        if err is not None:
            _rec(subtest, "subfail", err)
        return _orig["addSubTest"](self, test, subtest, err)

    _r.TestResult.addSuccess = addSuccess
    _r.TestResult.addFailure = addFailure
    _r.TestResult.addError = addError
    _r.TestResult.addSkip = addSkip
    _r.TestResult.addSubTest = addSubTest
