"""Triton Python models for tests (``workbench/testing/python_models/<name>``) and helpers.

Each folder holds a ``config.pbtxt`` and ``1/model.py`` written the way Triton's own
python_backend examples are (``import triton_python_backend_utils as pb_utils``): add_sub,
identity, string_identity (BYTES), raiser, error_response, wrong_count, crasher, lifecycle,
repeat (decoupled), bls_sync, bls_async, bls_decoupled, auto_complete (no I/O in its
config), helper_import (imports a file next to model.py), init_fails, batch_count,
sleeper, sender_once (non-decoupled, answers through its response sender), shm_truncator
(truncates the file an input names, then answers the identity of INPUT0), identity_bf16 (BF16
through DLPack and torch, as Triton's QA model), async_gate and async_gate_bls (decoupled
``async def execute``), until_cancelled (stops when its request is cancelled), bls_cancel
(cancels a BLS stream), forker (a fork Pool whose workers try BLS), model_control
(runs the `pb_utils.load_model` / `unload_model` / `is_model_ready` call a request describes) and
words_until_cancelled (a decoupled BYTES text model streaming words until cancelled: the OpenAI
routes' max_tokens). They run in the real Python backend; nothing is mocked.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

from workbench import Server, ServerOptions
from workbench.backends.python.transport import SHM_DIR, SHM_PREFIX

PYTHON_MODELS = Path(__file__).with_name("python_models")


def copy_python_model(repo: Path, source: str, name: str | None = None, *,
                      parameters: dict[str, str] | None = None, extra: str = "",
                      config: bool = True) -> Path:
    """Copy ``python_models/<source>`` to ``repo/<name>`` (default: ``source``).

    Args:
        name: the model's name there (the config's ``name`` is changed to match).
        parameters: model config ``parameters`` to set (replacing same-named ones).
        extra: config text appended (e.g. an ``instance_group``).
        config: False drops ``config.pbtxt`` (the model then relies on auto-complete).

    Returns:
        The model folder.
    """
    name = name or source
    folder = repo / name
    shutil.copytree(PYTHON_MODELS / source, folder, ignore=shutil.ignore_patterns("__pycache__"))
    config_file = folder / "config.pbtxt"
    if not config:
        config_file.unlink()
        return folder
    text = re.sub(r'^name: ".*"$', f'name: "{name}"', config_file.read_text(), flags=re.M)
    for key, value in (parameters or {}).items():
        text = re.sub(rf'^parameters {{ key: "{re.escape(key)}".*$\n?', "", text, flags=re.M)
        text += f'parameters {{ key: "{key}" value {{ string_value: "{value}" }} }}\n'
    config_file.write_text(text + extra)
    return folder


@contextlib.asynccontextmanager
async def python_models_server(repo: Path, *names: str) -> AsyncIterator[Server]:
    """A started :class:`~workbench.Server` on ``repo`` holding copies of the test models
    ``names``; on exit it is stopped and no stub's shared-memory segment may be left."""
    for name in names:
        copy_python_model(repo, name)
    async with Server(ServerOptions(model_repository=[str(repo)], exit_on_error=False)) as engine:
        yield engine
    assert python_backend_segments() == [], "stub shared-memory segments left behind"


def python_backend_segments() -> list[str]:
    """Shared-memory segments of this process's Python-backend stubs still in /dev/shm."""
    prefix = f"{SHM_PREFIX}wb{os.getpid()}_"
    return sorted(n for n in os.listdir(SHM_DIR) if n.startswith(prefix))


__all__ = ["PYTHON_MODELS", "copy_python_model", "python_backend_segments", "python_models_server"]
