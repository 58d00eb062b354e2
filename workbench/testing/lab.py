"""JupyterLab in tests: where the workbench Lab extension is installed, and the flags that
keep a test's ``jupyter lab`` off the network.

The Lab extension (``@workbench/jupyterlab``, sources in ``extensions/jupyterlab``) is a
prebuilt ("federated") extension: ``make labextension`` (run by ``make jupyter`` and ``make
test``) builds it with ``jupyter-builder`` and copies it to
``<venv>/share/jupyter/labextensions/@workbench/jupyterlab``, where JupyterLab finds it among
``jupyter --paths``' data folders.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

#: the Lab extension's npm package name (extensions/jupyterlab/package.json)
LAB_EXTENSION = "@workbench/jupyterlab"
#: the command its launcher card runs
OPEN_DASHBOARD_COMMAND = "workbench:open-dashboard"
#: `jupyter lab` flags for tests: no news feed, no update check (no network here), and the
#: application object on ``window.jupyterapp`` so a browser test can run commands
LAB_TEST_FLAGS = (
    "--LabApp.news_url=None",
    "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
    "--LabApp.expose_app_in_browser=True",
)


def installed_lab_extension() -> Path | None:
    """The folder JupyterLab loads ``@workbench/jupyterlab`` from (the first of Jupyter's data
    paths that has it), or ``None`` when it is not installed (or JupyterLab is missing)."""
    try:
        from jupyter_core.paths import jupyter_path
    except ImportError:
        return None
    for folder in jupyter_path("labextensions"):
        candidate = Path(folder, *LAB_EXTENSION.split("/"))
        if (candidate / "package.json").is_file():
            return candidate
    return None


def lab_missing() -> str | None:
    """Why a JupyterLab test cannot run here, or ``None``."""
    if importlib.util.find_spec("jupyterlab") is None:
        return "jupyterlab is not installed (the `dev` extra has it)"
    if installed_lab_extension() is None:
        return (f"the {LAB_EXTENSION} Lab extension is not built/installed "
                "(`make labextension` builds it with npm and jupyter-builder)")
    return None


__all__ = ["LAB_EXTENSION", "LAB_TEST_FLAGS", "OPEN_DASHBOARD_COMMAND", "installed_lab_extension",
           "lab_missing"]
