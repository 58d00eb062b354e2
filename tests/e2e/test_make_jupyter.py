"""``make jupyter`` as a person runs it: the Makefile's own recipe (its set-up prerequisites
taken as done, ``make -o``) starts Jupyter with the workbench on free ports and a temporary
repository and root folder, prints the dashboard's URL with a fresh token, that URL answers
the dashboard page, and SIGTERM stops it cleanly (issue 16, item 14: the printed URL had no
test)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from workbench.testing.process import free_ports
from workbench.testing.reload import write_add_sub

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
ENABLE_FILE = ROOT / "jupyter-config" / "jupyter_server_config.d" / "workbench.json"
#: the venv running these tests (the Makefile's VENV)
VENV = Path(sys.executable).parent.parent
DASHBOARD_URL = re.compile(r"==> dashboard:\s+(http://localhost:(\d+)/workbench/\?token=(\S+))")
ENGINE_UP = re.compile(r"workbench engine (running|did not start)")
#: seconds the whole start may take (a deadline: a slow machine, not a measurement)
START_S = 60.0


def test_make_jupyter_prints_a_dashboard_url_that_opens(tmp_path: Path) -> None:
    if not (VENV / "bin" / "jupyter").exists() or shutil.which("make") is None:
        pytest.skip(f"no jupyter in {VENV} (make setup installs it) or no make")
    write_add_sub(tmp_path / "models")
    config = tmp_path / "config" / "jupyter_server_config.d"
    config.mkdir(parents=True)
    shutil.copy(ENABLE_FILE, config / "workbench.json")
    jupyter_port, http_port, grpc_port, metrics_port = free_ports(4)
    env = {key: value for key, value in os.environ.items() if key != "JUPYTER_TOKEN"}
    env.update(JUPYTER_CONFIG_DIR=str(tmp_path / "config"), JUPYTER_DATA_DIR=str(tmp_path / "data"),
               JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"), JUPYTER_PLATFORM_DIRS="0")
    (tmp_path / "root").mkdir()
    command = ["make", "--no-print-directory", "-o", "setup", "-o", "labextension", "-o", "tutorials",
               "jupyter", f"VENV={VENV}", "JUPYTER_APP=server", f"REPO={tmp_path / 'models'}",
               f"JUPYTER_PORT={jupyter_port}", f"HTTP_PORT={http_port}", f"GRPC_PORT={grpc_port}",
               f"METRICS_PORT={metrics_port}", f"JUPYTER_ARGS=--ServerApp.root_dir={tmp_path / 'root'}"]
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, start_new_session=True)
    lines: list[str] = []
    url: list[re.Match] = []
    up = threading.Event()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line.rstrip("\n"))
            if not url and (found := DASHBOARD_URL.search(line)):
                url.append(found)
            if ENGINE_UP.search(line):
                up.set()
        up.set()  # the output ended: stop waiting

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert up.wait(START_S), "\n".join(lines)
        assert url, "make jupyter printed no dashboard URL:\n" + "\n".join(lines)
        printed, port, token = url[0].groups()
        assert int(port) == jupyter_port and len(token) >= 24
        assert "workbench engine running" in "\n".join(lines), "\n".join(lines)
        page = httpx.get(printed, timeout=30)
        assert page.status_code == 200
        assert "<title>Model Serving Workbench</title>" in page.text
        # the Lab URL opens the tutorials' folder (a bare /lab URL opened the file browser at /)
        assert f"/lab/tree/work?token={token}" in "\n".join(lines), "\n".join(lines)
    finally:
        os.killpg(process.pid, signal.SIGTERM)  # make and the jupyter it exec'd
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            pytest.fail("make jupyter did not stop within 30 s of SIGTERM:\n" + "\n".join(lines))
        reader.join(timeout=10)
        assert process.stdout is not None
        process.stdout.close()
    assert any("Shutting down" in line or "shutting down" in line.lower() for line in lines), "\n".join(lines)
