"""A real ``jupyter server`` with the workbench extension (the v2 ports open) stopped by
SIGTERM, as a service manager or ``kill`` stops it: the engine drains and unloads, and the
process ends as soon as Jupyter's shutdown is over, without the interpreter's finalization
(``workbench.jupyter.process_exit``: with the sample models' frameworks imported it took
12-28 s after "all models unloaded; exiting"), and grpc-core's "Closing acceptor. Failed accept4"
line is not printed (as in ``workbench serve``). The time itself is measured in
``bench/jupyter_stop.py``; here, what the stop does and prints, waiting on the process's exit.

The finalization is seen by an ``atexit`` hook that a ``sitecustomize`` registers at the
interpreter's start (so it runs after every later one): it printed its line before (the test
failed), and never runs now.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import httpx
import pytest

from workbench.testing.process import JupyterProcess
from workbench.testing.reload import write_add_sub

ENABLE_FILE = Path(__file__).resolve().parents[2] / "jupyter-config" / "jupyter_server_config.d" / "workbench.json"
FINALIZED = "the interpreter's finalization ran"


def jupyter_with_a_finalization_hook(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                     exit_at_once: bool = True) -> JupyterProcess:
    """A Jupyter server with the extension's v2 ports open, whose interpreter prints
    :data:`FINALIZED` when its finalization runs."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        f"import atexit, sys\natexit.register(lambda: print({FINALIZED!r}, file=sys.stderr, flush=True))\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])))
    write_add_sub(tmp_path / "models")
    return JupyterProcess(
        [f"--Workbench.model_repository={tmp_path / 'models'}", "--Workbench.open_ports=True",
         "--Workbench.http_port=0", "--Workbench.grpc_port=0", "--Workbench.metrics_port=0",
         f"--Workbench.exit_at_once={exit_at_once}"],
        home=tmp_path / "home", enable_file=ENABLE_FILE)


@pytest.mark.parametrize("exit_at_once", [True, False])
def test_sigterm_drains_the_engine_and_ends_without_the_finalization(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exit_at_once: bool) -> None:
    jupyter = jupyter_with_a_finalization_hook(tmp_path, monkeypatch, exit_at_once)
    assert jupyter.stop(signal.SIGTERM) == 0
    log = jupyter.log
    assert "received signal 15, stopping" in log
    assert log.index("Waiting for in-flight requests to complete.") < log.index("all models unloaded; exiting")
    # with exit_at_once (the default) the process ends right after Jupyter's shutdown
    assert (FINALIZED in log) is not exit_at_once, log[-2000:]
    # grpc-core's line about the listener the stop shuts is kept off stderr (it was printed)
    assert "Closing acceptor" not in log


def test_a_shutdown_request_ends_the_process_without_the_finalization(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``jupyter server stop`` (``POST /api/shutdown``): Jupyter cleans up without setting
    ``ServerApp._stopping``, so the process went on into the finalization and ``jupyter
    server stop`` sent SIGTERM after its 5 s (a new user's trial: 10-14 s, "Terminated")."""
    jupyter = jupyter_with_a_finalization_hook(tmp_path, monkeypatch)
    answer = httpx.post(f"http://127.0.0.1:{jupyter.jupyter_port}/api/shutdown", headers=jupyter.headers,
                        timeout=60)
    assert answer.status_code in (200, 204), answer.text
    assert jupyter.process.wait(60) == 0  # ended by itself (a timeout raises)
    assert jupyter.stop() == 0
    log = jupyter.log
    assert "Shutting down on /api/shutdown request" in log and "all models unloaded; exiting" in log
    assert FINALIZED not in log, log[-2000:]
    assert "Closing acceptor" not in log
