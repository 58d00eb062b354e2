"""What an attacker sends or plants: a Python model whose ``initialize`` writes a marker file,
so a test can tell whether uploaded code ran (the security tests of the load API); raw HTTP/1.1
request heads and chunks for the body attacks (slow bodies, endless chunked bodies); a FIFO in
a model folder (a read of it blocks until a writer comes, as a read on a hung mount does) and
a folder tree nested thousands of folders deep (the poll hardening tests)."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import subprocess
from pathlib import Path

from workbench.testing.reload import add_sub_config, atomic_write, write_add_sub

_MODEL = """
import pathlib

class TritonPythonModel:
    def initialize(self, args):
        pathlib.Path({marker!r}).write_text("pwned")

    def execute(self, requests):
        return []
"""
#: a Python model (``model.py``) whose ``initialize`` returns only once the server process is
#: gone (its stub is then re-parented): a load that never ends while the server runs
ENDLESS_MODEL = """
import os
import time


class TritonPythonModel:
    def initialize(self, args):
        server = os.getppid()
        while os.getppid() == server:
            time.sleep(0.05)

    def execute(self, requests):
        return []
"""
#: the config of those models (one FP32 input and output)
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


#: where a FIFO in a victim model's folder (:func:`write_victim`) takes the place of a file
#: that loading opens: the config, the model file, a label file, a warmup data file
OPENED_AT_LOAD = ("config.pbtxt", "1/model.onnx", "labels.txt", "warmup/in0")


def write_victim(repo: Path, name: str) -> Path:
    """``repo/name``: the add_sub ONNX model with a label file on ``OUTPUT0`` and a warmup
    sample reading ``warmup/in0``, so that loading it opens every file of
    :data:`OPENED_AT_LOAD`; returns its folder."""
    config = add_sub_config(name, 8, 1).replace(
        '{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] }',
        '{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] label_filename: "labels.txt" }',
    ) + ('model_warmup [ { name: "w" batch_size: 1 inputs [\n'
         '  { key: "INPUT0" value { data_type: TYPE_FP32 dims: [ 16 ] input_data_file: "in0" } },\n'
         '  { key: "INPUT1" value { data_type: TYPE_FP32 dims: [ 16 ] zero_data: true } } ] } ]\n')
    folder = write_add_sub(repo, name, 8, 1)
    atomic_write(folder / "config.pbtxt", config)
    atomic_write(folder / "labels.txt", "".join(f"class{i}\n" for i in range(16)))
    atomic_write(folder / "warmup" / "in0", bytes(64))
    return folder


def plant_fifo(path: Path) -> Path:
    """Put a FIFO at ``path`` (replacing a file there; parent folders made)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    os.mkfifo(path)
    return path


def release_fifo(path: Path) -> None:
    """Let a reader blocked on the FIFO ``path`` go: open and close its writing end (EOF)."""
    with contextlib.suppress(OSError):
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))


def nested_folders(root: Path, depth: int) -> Path:
    """Make ``root/a/a/.../a``, ``depth`` folders below ``root``, through folder descriptors
    (the whole path may pass ``PATH_MAX``); returns ``root``."""
    root.mkdir(parents=True)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir("a", dir_fd=fd)
            inner = os.open("a", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
    finally:
        os.close(fd)
    return root


def remove_tree(root: Path) -> None:
    """Remove ``root`` however deep it is nested (``shutil.rmtree`` recurses and fails past
    about 1,000 levels; ``rm -rf`` does not)."""
    subprocess.run(["rm", "-rf", "--", str(root)], check=True)


__all__ = ["CONFIG", "ENDLESS_MODEL", "OPENED_AT_LOAD", "chunk", "load_body", "marker_model", "nested_folders",
           "plant_fifo", "release_fifo", "remove_tree", "request_head", "write_victim"]
