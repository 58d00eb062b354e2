"""Run an upstream unittest module with the platforms this run lacks filtered out
(the same effect as BACKENDS="onnx"): usage run_patched.py MODULE [TESTNAME...]"""

import os
import sys
import unittest

sys.path.insert(0, os.getcwd())
sys.path.insert(0, "../common")
import test_util as tu

if os.environ.get("NO_TRT", "1") == "1":
    tu.validate_for_trt_model = lambda *a, **k: False
if os.environ.get("NO_LIBTORCH", "1") == "1":
    tu.validate_for_libtorch_model = lambda *a, **k: False
mod = __import__(sys.argv[1])
if os.environ.get("TRIALS"):
    mod._trials = tuple(os.environ["TRIALS"].split())
names = sys.argv[2:] or [sys.argv[1]]
suite = (
    unittest.defaultTestLoader.loadTestsFromNames(names, mod if sys.argv[2:] else None)
    if sys.argv[2:]
    else unittest.defaultTestLoader.loadTestsFromModule(mod)
)
r = unittest.TextTestRunner(verbosity=2).run(suite)
sys.exit(0 if r.wasSuccessful() else 1)
