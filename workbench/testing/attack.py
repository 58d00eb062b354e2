"""What an attacker sends: a Python model whose ``initialize`` writes a marker file, so a test
can tell whether uploaded code ran (the security tests of the load API); raw HTTP/1.1 request
heads and chunks for the body attacks (slow bodies, endless chunked bodies)."""

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


def request_head(method: str, path: str, framing: bytes) -> bytes:
    """A raw HTTP/1.1 request head, JSON-typed, whose last header is ``framing``
    (``b"content-length: N"`` or ``b"transfer-encoding: chunked"``)."""
    return (b"%s %s HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n%s\r\n\r\n"
            % (method.encode(), path.encode(), framing))


def chunk(data: bytes) -> bytes:
    """``data`` as one chunk of a chunked body (``b"0\\r\\n\\r\\n"`` ends the body)."""
    return b"%x\r\n%s\r\n" % (len(data), data)


__all__ = ["CONFIG", "chunk", "load_body", "marker_model", "request_head"]
