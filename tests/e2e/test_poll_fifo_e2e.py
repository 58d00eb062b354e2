"""``workbench serve --model-control-mode poll`` with FIFOs where loading opens files (issue
30, finding 4): every variant at once in one real server process (a FIFO as a model's
config.pbtxt, as its model.onnx, as its label file, as its warmup data file, as a Python
model's model.py, and in ``configs/``). Each such model fails its reload with the reason and
keeps serving its last good version, a later change to another model is applied, and SIGTERM
stops the server (before the fix: the poll blocked on the FIFO for good, and SIGTERM needed
a SIGKILL)."""

from __future__ import annotations

import signal
from pathlib import Path

import httpx
import pytest

from workbench.testing.attack import CONFIG, ENDLESS_MODEL, OPENED_AT_LOAD, plant_fifo, release_fifo, write_victim
from workbench.testing.process import ServerProcess
from workbench.testing.python_backend import copy_python_model
from workbench.testing.reload import add_sub_config, atomic_write, write_add_sub

pytestmark = pytest.mark.e2e


def test_fifos_in_model_folders_stop_neither_polling_nor_sigterm(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    fifos = []
    for index, where in enumerate(OPENED_AT_LOAD):
        fifos.append(write_victim(repo, f"victim{index}") / where)
    fifos.append(copy_python_model(repo, "identity", "victim_python") / "1" / "model.py")
    fifos.append(write_add_sub(repo, "victim_configs", 8, 1) / "configs" / "x.pbtxt")
    write_add_sub(repo, "other", 8, 1)
    process = ServerProcess([f"--model-repository={repo}", "--model-control-mode=poll",
                             "--repository-poll-secs=0.1", "--exit-timeout-secs=10",
                             "--allow-grpc=false", "--allow-metrics=false"], timeout_s=120)
    status = None
    try:
        for fifo in fifos:
            plant_fifo(fifo)
        for fifo in fifos[:-1]:  # each reload fails on its FIFO (configs/ is never read)
            process.wait_for_log(rf"failed to reload '{fifo.relative_to(repo).parts[0]}'", timeout_s=60)
        since = len(process.lines)
        atomic_write(repo / "other" / "config.pbtxt", add_sub_config("other", 4, 1))
        process.wait_for_log(r"successfully loaded 'other' version 1", timeout_s=60, since=since)
        with httpx.Client(base_url=f"http://127.0.0.1:{process.port}", timeout=30) as client:
            assert client.get("/v2/models/other/config").json()["max_batch_size"] == 4
            rows = {r["name"]: r for r in client.post("/v2/repository/index", json={}).json()}
        for fifo in fifos[:-1]:
            row = rows[fifo.relative_to(repo).parts[0]]
            assert row["state"] == "READY", row  # the last good version keeps serving
            assert "not a regular file (a FIFO)" in row["reason"], row
        assert rows["victim_configs"]["state"] == "READY" and not rows["victim_configs"].get("reason")
    finally:
        status = process.stop(signal.SIGTERM, timeout_s=45)  # SIGKILL (-9) after 45 s: hung
        for fifo in fifos:
            release_fifo(fifo)
    assert status == 0, process.log[-4000:]


def test_a_load_that_never_ends_stops_neither_polling_nor_sigterm(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_add_sub(repo, "other", 8, 1)
    process = ServerProcess([f"--model-repository={repo}", "--model-control-mode=poll",
                             "--repository-poll-secs=0.1", "--exit-timeout-secs=3",
                             "--allow-grpc=false", "--allow-metrics=false"], timeout_s=120)
    try:
        staging = tmp_path / "endless"
        atomic_write(staging / "config.pbtxt", CONFIG)
        atomic_write(staging / "1" / "model.py", ENDLESS_MODEL)
        staging.rename(repo / "endless")
        process.wait_for_log(r"poll: added \['endless'\]", timeout_s=60)
        since = len(process.lines)
        atomic_write(repo / "other" / "config.pbtxt", add_sub_config("other", 4, 1))
        # before the fix: the poll waited for endless's load, and never saw this change
        process.wait_for_log(r"successfully loaded 'other' version 1", timeout_s=60, since=since)
    finally:
        status = process.stop(signal.SIGTERM, timeout_s=45)  # SIGKILL (-9) after 45 s: hung
    assert status == 1, process.log[-4000:]  # the exit timeout cut the drain short: exit at once
    assert "exit timeout reached" in process.log
