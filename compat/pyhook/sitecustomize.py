# compat harnesses (client side, on PYTHONPATH): record every unittest case run into $QA_RESULTS, one
# JSON line when the case ends: test id, outcome pass|fail|error|skip, message, cwd, and the
# environment that tells the variants of a case apart. A case whose subtests failed is one "fail"
# (unittest then calls neither addSuccess nor addFailure for the case itself; "subtests_failed"
# counts them). Cases run by pytest are recorded by qa_pytest_record.py instead (pytest does not
# report through unittest.TestResult). A record must never break the test run.
import os

if os.environ.get("QA_RESULTS"):
    import json
    import sys
    import time
    import traceback
    import unittest.result as _r

    _path = os.environ["QA_RESULTS"]
    _cases: dict = {}  # id(test) -> [outcome or None, message, failed subtests]

    def _message(err):
        try:
            msg = "".join(traceback.format_exception_only(err[0], err[1])).strip()
            if err[2] is not None:
                frames = [
                    f
                    for f in traceback.extract_tb(err[2])
                    if "/qa/" in f.filename or "/python_backend/" in f.filename
                ]
                if frames:
                    msg += "  @" + ";".join(f"{f.filename.split('/')[-1]}:{f.lineno}" for f in frames[-3:])
            return msg
        except Exception:  # noqa: BLE001 (a record must never break the test run)
            return str(err)

    def _write(test, outcome, msg, subtests_failed):
        record = {
            "test": test.id(),
            "outcome": outcome,
            "msg": msg[-1500:],
            "subtests_failed": subtests_failed,
            "cwd": os.getcwd(),
            "argv": sys.argv[0],
            "env_delay": os.environ.get("TRITONSERVER_DELAY_SCHEDULER"),
            "bt": os.environ.get("BATCHER_TYPE"),
            "trial": os.environ.get("MODEL_INSTANCES"),
            "nobatch": os.environ.get("NO_BATCHING"),
            "t": time.time(),
        }
        try:
            with open(_path, "a") as f:
                f.write(json.dumps(record) + "\n")
        except Exception:  # noqa: BLE001 (a record must never break the test run)
            pass

    def _set(test, outcome, err=None):
        case = _cases.setdefault(id(test), [None, "", 0])
        if case[0] is None:
            case[0], case[1] = outcome, (_message(err) if err is not None else "")

    _orig = {
        n: getattr(_r.TestResult, n)
        for n in ("startTest", "stopTest", "addSuccess", "addFailure", "addError", "addSkip", "addExpectedFailure",
                  "addUnexpectedSuccess", "addSubTest")
    }

    def startTest(self, test):
        _cases[id(test)] = [None, "", 0]
        return _orig["startTest"](self, test)

    def stopTest(self, test):
        outcome, msg, subtests_failed = _cases.pop(id(test), [None, "", 0])
        if subtests_failed and outcome in (None, "pass"):
            outcome = "fail"
        if outcome is not None:
            _write(test, outcome, msg, subtests_failed)
        return _orig["stopTest"](self, test)

    def addSuccess(self, test):
        _set(test, "pass")
        return _orig["addSuccess"](self, test)

    def addFailure(self, test, err):
        _set(test, "fail", err)
        return _orig["addFailure"](self, test, err)

    def addError(self, test, err):
        if not hasattr(test, "id") or test.__class__.__name__ == "_ErrorHolder":  # setUpClass / module errors
            _write(test, "error", _message(err), 0)
        else:
            _set(test, "error", err)
        return _orig["addError"](self, test, err)

    def addSkip(self, test, reason):
        _set(test, "skip")
        _cases[id(test)][1] = str(reason)
        return _orig["addSkip"](self, test, reason)

    def addExpectedFailure(self, test, err):
        _set(test, "pass")
        return _orig["addExpectedFailure"](self, test, err)

    def addUnexpectedSuccess(self, test):
        _set(test, "fail")
        return _orig["addUnexpectedSuccess"](self, test)

    def addSubTest(self, test, subtest, err):
        if err is not None:
            case = _cases.setdefault(id(test), [None, "", 0])
            case[2] += 1
            if not case[1]:
                case[1] = f"{subtest}: {_message(err)}"
        return _orig["addSubTest"](self, test, subtest, err)

    for _name in _orig:
        setattr(_r.TestResult, _name, globals()[_name])
