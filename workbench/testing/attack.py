"""What an attacker uploads: a Python model whose ``initialize`` writes a marker file, so a
test can tell whether uploaded code ran (the security tests of the load API)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

_MODEL = """
import pathlib

class TritonPythonModel:
    def initialize(self, args):
        pathlib.Path({marker!r}).write_text("pwned")

    def execute(self, requests):
        return []
"""
#: the config of that model (one FP32 input and output)
CONFIG = ('backend: "python"\ninput [{name: "IN" data_type: TYPE_FP32 dims: [1]}]\n'
          'output [{name: "OUT" data_type: TYPE_FP32 dims: [1]}]\n')


def marker_model(marker: Path) -> bytes:
    """``model.py`` bytes that write ``marker`` when the model loads."""
    return _MODEL.format(marker=str(marker)).encode()


def load_body(marker: Path) -> bytes:
    """The JSON body of ``POST /v2/repository/models/{m}/load`` uploading :func:`marker_model`
    as ``file:1/model.py`` with :data:`CONFIG` (Triton's repository extension)."""
    encoded = base64.b64encode(marker_model(marker)).decode()
    return json.dumps({"parameters": {"config": CONFIG, "file:1/model.py": encoded}}).encode()


__all__ = ["CONFIG", "load_body", "marker_model"]
