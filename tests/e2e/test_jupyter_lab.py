"""`jupyter lab` with the package installed: the engine runs in Lab's server, Lab's page
lists the prebuilt workbench Lab extension (launcher card "Model Serving Workbench") and
serves its bundle, and `jupyter labextension list` shows it enabled.

Skipped, with the reason, where JupyterLab or the built Lab extension is missing (`make
setup` builds and installs it). The browser side (clicking the card) is in tests/browser.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from workbench.testing.lab import (
    LAB_EXTENSION,
    LAB_TEST_FLAGS,
    OPEN_DASHBOARD_COMMAND,
    installed_lab_extension,
    lab_missing,
)
from workbench.testing.process import JupyterProcess
from workbench.testing.reload import write_add_sub

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
ENABLE_FILE = ROOT / "jupyter-config" / "jupyter_server_config.d" / "workbench.json"
BASE_URL = "/hub/user/lab/"
#: the JSON page config JupyterLab embeds in /lab
_PAGE_CONFIG = re.compile(r'<script id="jupyter-config-data" type="application/json">(.*?)</script>', re.S)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JupyterProcess]:
    missing = lab_missing()
    if missing:
        pytest.skip(missing)
    repo = tmp_path_factory.mktemp("lab") / "models"
    write_add_sub(repo)
    jupyter = JupyterProcess([f"--Workbench.model_repository={repo}", f"--ServerApp.base_url={BASE_URL}",
                              *LAB_TEST_FLAGS],
                             home=tmp_path_factory.mktemp("lab-home"), enable_file=ENABLE_FILE, lab=True)
    try:
        yield jupyter
    finally:
        jupyter.stop()


@pytest.fixture(scope="module")
def client(lab: JupyterProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=f"http://127.0.0.1:{lab.jupyter_port}{BASE_URL}", headers=lab.headers,
                      timeout=60) as session:
        yield session


def test_the_engine_runs_under_jupyter_lab(client: httpx.Client) -> None:
    status = client.get("workbench/api/status")
    assert status.status_code == 200, status.text
    assert status.json()["state"] == "running"
    models = client.get("workbench/api/models").json()["models"]
    assert [(m["name"], m["state"]) for m in models] == [("add_sub", "READY")]


def test_lab_loads_the_prebuilt_workbench_extension(client: httpx.Client) -> None:
    page = client.get("lab")
    assert page.status_code == 200, page.text[:500]
    found = _PAGE_CONFIG.search(page.text)
    assert found is not None, page.text[:500]
    config = json.loads(found.group(1))
    federated = {e["name"]: e for e in config["federated_extensions"]}
    assert LAB_EXTENSION in federated, sorted(federated)
    assert LAB_EXTENSION not in config.get("disabled_extensions", [])
    entry = federated[LAB_EXTENSION]
    bundle = client.get(f"lab/extensions/{LAB_EXTENSION}/{entry['load']}")
    assert bundle.status_code == 200
    assert entry["extension"] == "./extension" and entry["style"] == "./style"
    # the plugin's code (a chunk beside the remote entry, as served) has its command and label
    installed = installed_lab_extension()
    assert installed is not None
    static = installed / "static"
    code = "".join(client.get(f"lab/extensions/{LAB_EXTENSION}/static/{chunk.name}").text
                   for chunk in static.glob("*.js"))
    assert OPEN_DASHBOARD_COMMAND in code and "Model Serving Workbench" in code


def test_labextension_list_shows_it_enabled() -> None:
    missing = lab_missing()
    if missing:
        pytest.skip(missing)
    jupyter = shutil.which("jupyter", path=str(Path(sys.executable).parent)) or "jupyter"
    listed = subprocess.run([jupyter, "labextension", "list"], capture_output=True, text=True, timeout=120)
    output = re.sub(r"\x1b\[[0-9;]*m", "", listed.stdout + listed.stderr)
    line = next((entry for entry in output.splitlines() if LAB_EXTENSION in entry), "")
    assert "enabled" in line and "OK" in line, output
