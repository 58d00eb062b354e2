"""Auto-complete a Python model's config from its ``auto_complete_config`` (TRITON_COMPAT §3).

As in Triton, the model's static ``TritonPythonModel.auto_complete_config(config)`` runs
once per load in a throwaway interpreter: the Python backend's stub program in its
``--auto-complete`` mode (``workbench/backends/python/stub.py``, started as a separate
process, never imported here). It receives the config as Triton's JSON, and the server
merges back only what Triton's core merges: ``max_batch_size``, ``input``, ``output``,
the scheduler choice (``dynamic_batching`` / ``sequence_batching``) and
``model_transaction_policy``.

The process is skipped when ``model.py``'s text never mentions ``auto_complete_config``
(saves ~0.2 s per load; a method inherited from a class in another file is then missed).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.common.errors import InvalidModelConfig
from workbench.config.model_config import model_config_to_json
from workbench.files.model_files import read_text

#: the Python backend's stub program (run as a file: a process boundary, not an import)
STUB_PROGRAM = Path(__file__).resolve().parents[1] / "backends" / "python" / "stub.py"
#: seconds the model's import plus ``auto_complete_config`` may take
AUTO_COMPLETE_TIMEOUT_S = 120.0
#: the fields Triton's core takes back from a Python model's auto-complete
MERGED_FIELDS = ("max_batch_size", "input", "output", "dynamic_batching", "sequence_batching",
                 "model_transaction_policy")


def autocomplete_from_python(config: ModelConfig, model_file: Path, python_based: bool = False) -> None:
    """Fill ``config`` in place from ``model_file``'s ``auto_complete_config``.

    Args:
        config: the config so far (backend fields filled); mutated.
        model_file: the model's ``model.py``.
        python_based: ``model_file`` is a Python-based backend's (imported as ``model`` with
            its folder on ``sys.path``, as Triton's stub imports one).

    Raises:
        InvalidModelConfig: the model cannot be imported, ``auto_complete_config`` raised
            (e.g. the ``ValueError`` of a conflicting ``add_input``), returned something
            else than its config, or timed out. As in Triton's python backend the message
            is the Python error as pybind11 words it ("ValueError: configuration specified
            max_batch_size 6, but in auto-complete-config function for model 'm' specified
            max_batch_size 4" then the model's frames after "At:"), or the stub's own text
            ("auto_complete_config function in model 'm' must return a valid
            pb.ModelConfig object.").
    """
    try:
        source = read_text(model_file)
    except OSError as exc:  # a FIFO, too large, no answer in time (workbench.files.model_files)
        raise InvalidModelConfig(f"unable to read '{model_file}': {exc.strerror or exc}") from None
    if "auto_complete_config" not in source:
        return
    answer = _run_stub(config, model_file, python_based)
    if "error" in answer:  # the stub's text as Triton's reports it: "ValueError: ...\n\nAt:\n..."
        raise InvalidModelConfig(str(answer["error"]))
    _merge(config, answer["config"])


def _run_stub(config: ModelConfig, model_file: Path, python_based: bool) -> dict[str, Any]:
    command = [sys.executable, str(STUB_PROGRAM), "--auto-complete", str(model_file),
               *(["--python-based-backend"] if python_based else [])]
    try:
        done = subprocess.run(command, input=json.dumps(model_config_to_json(config)), text=True,
                              stdout=subprocess.PIPE, timeout=AUTO_COMPLETE_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise InvalidModelConfig(
            f"auto-complete of model '{config.name}' did not finish within "
            f"{AUTO_COMPLETE_TIMEOUT_S:.0f} s"
        ) from None
    try:
        answer = json.loads(done.stdout)
    except json.JSONDecodeError:
        raise InvalidModelConfig(
            f"auto-complete of model '{config.name}' failed: the stub exited with code "
            f"{done.returncode} without an answer (see the server log)"
        ) from None
    return answer if isinstance(answer, dict) else {"error": "no answer"}


def _merge(config: ModelConfig, completed: Mapping[str, Any]) -> None:
    """Copy :data:`MERGED_FIELDS` of the model's answer into ``config``."""
    part = {key: completed[key] for key in MERGED_FIELDS if key in completed}
    merged = ModelConfig()
    try:
        json_format.ParseDict(part, merged, ignore_unknown_fields=False)
    except json_format.ParseError as exc:
        raise InvalidModelConfig(
            f"auto-complete of model '{config.name}' produced an invalid config: {exc}"
        ) from None
    config.max_batch_size = merged.max_batch_size
    del config.input[:]
    config.input.extend(merged.input)
    del config.output[:]
    config.output.extend(merged.output)
    choice = merged.WhichOneof("scheduling_choice")
    if choice is not None and config.WhichOneof("scheduling_choice") in (None, choice):
        getattr(config, choice).CopyFrom(getattr(merged, choice))
    if merged.HasField("model_transaction_policy"):
        config.model_transaction_policy.CopyFrom(merged.model_transaction_policy)


__all__ = ["MERGED_FIELDS", "STUB_PROGRAM", "autocomplete_from_python"]
