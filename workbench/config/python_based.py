"""Python-based backends: a ``model.py`` in the backend directory serving as a backend.

python_backend's README "Python-based Backends", Triton core's
``TritonModel::GetBackendRuntimeLibraryName``: a model whose config says ``backend: "<name>"``
for a backend that has no library (here: no row in the backend table,
:mod:`.backend_specs`) is served by the Python backend running
``<--backend-directory>/<name>/model.py``; the model's own version folders then hold no
``model.py`` (they hold what that backend reads, e.g. a ``model.json``). Triton then sets the
config's ``runtime`` to ``model.py``; a config may also say ``runtime: "model.py"`` itself.
The backend's ``auto_complete_config`` runs as for any Python model.
"""

from __future__ import annotations

from pathlib import Path

from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.config.backend_specs import backend_spec

#: the file a Python-based backend's folder holds (Triton's ``kPythonFilename``)
PYTHON_FILENAME = "model.py"


def python_based_model_file(config: ModelConfig, backend_directory: str) -> Path | None:
    """``<backend_directory>/<config.backend>/model.py`` when ``config.backend`` is not a
    backend of the table, its ``runtime`` is empty or ``model.py``, and that file exists;
    else None. A backend name that is not a plain folder name (``/``, ``..``) never leaves
    the backend directory: None (Triton refuses such a path as escaping it)."""
    name = config.backend
    if (not name or not backend_directory or backend_spec(name) is not None
            or config.runtime not in ("", PYTHON_FILENAME)
            or name in (".", "..") or "/" in name or "\\" in name or "\0" in name):
        return None
    path = Path(backend_directory) / name / PYTHON_FILENAME
    return path if path.is_file() else None


__all__ = ["PYTHON_FILENAME", "python_based_model_file"]
