"""Autoserialization of a Python-defined DALI pipeline (``dali.py``), as Triton's dali_backend does.

A version folder may hold the pipeline as Python: a ``pipeline_def`` decorated with
``@nvidia.dali.plugin.triton.autoserialize``. Triton's backend imports that file in a separate
``python3`` process and calls DALI's ``invoke_autoserialize`` (which finds the one decorated
function and serializes its pipeline to a file); so does :func:`autoserialize`, with this
server's interpreter, so the user's module never runs inside the server. The file's folder is
put first on the child's ``sys.path``, so modules beside it import (Triton's command runs in
the server's working directory instead).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from workbench.common.errors import ModelLoadError

#: seconds the child may take (importing DALI and the module, building the graph)
TIMEOUT_S = 120

#: what the child writes before its error's text (the text alone, not the traceback, goes into
#: the load's reason; DALI and the module may print other lines before it)
ERROR_MARK = "--workbench-autoserialize-error--"

_CHILD = f"""\
import importlib.util, os, sys
path, target = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.dirname(path))
try:
    from nvidia.dali._utils.autoserialize import invoke_autoserialize
    spec = importlib.util.spec_from_file_location("workbench_dali_autoserialize", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    invoke_autoserialize(module, target)
except BaseException as exc:
    sys.stderr.write("\\n{ERROR_MARK}\\n" + type(exc).__name__ + ": " + str(exc))
    sys.exit(1)
"""


def autoserialize(model: str, module_path: Path, timeout_s: float = TIMEOUT_S) -> bytes:
    """The serialized pipeline of the ``@autoserialize`` function in ``module_path``.

    Raises:
        ModelLoadError: the child failed (the module raised, it has no or several
            ``@autoserialize`` functions: DALI's text, the last lines of its stderr) or timed out.
    """
    handle, target = tempfile.mkstemp(prefix="workbench-dali-", suffix=".dali")
    os.close(handle)
    try:
        try:
            done = subprocess.run(
                [sys.executable, "-c", _CHILD, str(module_path), target],
                capture_output=True, text=True, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired:
            raise ModelLoadError(
                f"unable to load model '{model}': autoserialization of '{module_path.name}' took "
                f"more than {timeout_s:g} s") from None
        if done.returncode != 0:
            _, marked, error = done.stderr.rpartition(ERROR_MARK)
            lines = (error if marked else done.stderr).strip().splitlines()
            tail = " ".join(" ".join(lines if marked else lines[-3:]).split())[:600]
            raise ModelLoadError(
                f"unable to load model '{model}': autoserialization of '{module_path.name}' "
                f"failed: {tail}")
        return Path(target).read_bytes()
    finally:
        Path(target).unlink(missing_ok=True)


__all__ = ["autoserialize"]
