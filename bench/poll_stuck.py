"""Poll mode against a model folder that never answers or never ends: does polling go on, and
does SIGTERM stop the server? And what a big ``config.pbtxt`` costs the health probes.

Starts ``workbench serve --model-control-mode poll --repository-poll-secs 0.2`` (the code on
PYTHONPATH) on a repository of two ONNX add_sub models, ``victim`` and ``other``; then, for
``--variant``:

* ``config`` / ``model`` / ``labels`` / ``warmup`` / ``python`` / ``configs``: a FIFO takes the
  place of victim's ``config.pbtxt``, ``1/model.onnx``, its label file, its warmup data file,
  a Python model's ``1/model.py``, or appears in ``configs/``;
* ``deep``: ``victim/deep/a/a/...`` nested ``--depth`` folders deep;
* ``endless``: a new Python model whose ``initialize`` never returns while the server runs;
* ``bigconfig``: a new model folder ``big`` whose ``config.pbtxt`` is ``--mib`` MiB (add_sub's
  config followed by ``parameters`` entries) is moved into the repository; a thread polls
  ``/v2/health/live`` back to back meanwhile.

Then ``other``'s ``config.pbtxt`` is rewritten (max_batch_size 8 -> 4; ``--settle`` seconds
after the attack, at once for ``bigconfig``) and the script measures how long until
``/v2/models/other/config`` serves it (poll behaviour), how long ``big`` took to be READY or
UNAVAILABLE, reads victim's (or big's) row of the repository index, and sends SIGTERM and
measures the exit (SIGKILL after ``--kill-after`` s: "hung"). Prints one Markdown table row:
variant | index row | other's change applied | SIGTERM exit | big settled | slowest health
probe. Not a pass/fail test.

    PYTHONPATH=$PWD python bench/poll_stuck.py --variant config
    PYTHONPATH=$PWD python bench/poll_stuck.py --variant config --server-pythonpath /other/checkout
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from workbench.testing.attack import (
    CONFIG,
    ENDLESS_MODEL,
    nested_folders,
    plant_fifo,
    release_fifo,
    remove_tree,
    write_victim,
)
from workbench.testing.process import ServerProcess
from workbench.testing.python_backend import copy_python_model
from workbench.testing.reload import add_sub_config, atomic_write, write_add_sub

sys.path.insert(0, str(Path(__file__).resolve().parent))
#: the health prober of the big-JSON bench, loaded from this folder
HealthPoller: Any = importlib.import_module("big_json").HealthPoller

VARIANTS = ("config", "model", "labels", "warmup", "python", "configs", "deep", "endless", "bigconfig")


def build(repo: Path, variant: str) -> Path:
    """The repository; returns victim's folder."""
    write_add_sub(repo, "other", 8, 1)
    if variant == "python":
        return copy_python_model(repo, "identity", "victim")
    return write_victim(repo, "victim")


PLANTED: list[Path] = []


def plant(path: Path) -> None:
    PLANTED.append(plant_fifo(path))


def big_config(mib: float) -> str:
    head = add_sub_config("big", 8, 1)
    entry = 'parameters { key: "p%07d" value { string_value: "0123456789abcdef" } }\n'
    count = int(mib * 2**20 / len(entry % 0))
    return head + "".join(entry % i for i in range(count))


def attack(repo: Path, folder: Path, variant: str, depth: int, mib: float) -> None:
    if variant == "config":
        plant(folder / "config.pbtxt")
    elif variant == "model":
        plant(folder / "1" / "model.onnx")
    elif variant == "labels":
        plant(folder / "labels.txt")
    elif variant == "warmup":
        plant(folder / "warmup" / "in0")
    elif variant == "python":
        plant(folder / "1" / "model.py")
    elif variant == "configs":
        plant(folder / "configs" / "x.pbtxt")
    elif variant == "deep":
        os.rename(nested_folders(repo.parent / "deep", depth), folder / "deep")
    elif variant == "endless":
        staging = repo.parent / "endless"
        atomic_write(staging / "config.pbtxt", CONFIG)
        atomic_write(staging / "1" / "model.py", ENDLESS_MODEL)
        os.rename(staging, repo / "endless")
    elif variant == "bigconfig":
        staging = repo.parent / "big"
        staging.mkdir()
        (staging / "config.pbtxt").write_text(big_config(mib))
        shutil.copytree(repo / "other" / "1", staging / "1")
        os.rename(staging, repo / "big")


def victim_row(client: httpx.Client, name: str) -> str:
    try:
        rows = client.post("/v2/repository/index", json={}, timeout=5).json()
    except httpx.HTTPError as exc:
        return f"index did not answer ({type(exc).__name__})"
    found = [f"{r.get('version', '')}:{r.get('state')} {r.get('reason', '')}".strip()
             for r in rows if r["name"] == name]
    return "; ".join(found) or "not in the index"


def wait_applied(client: httpx.Client, timeout_s: float) -> float | None:
    """Seconds until other's config serves max_batch_size 4, or None."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        with contextlib.suppress(httpx.HTTPError):
            if client.get("/v2/models/other/config", timeout=2).json().get("max_batch_size") == 4:
                return time.monotonic() - started
        time.sleep(0.1)
    return None


def wait_settled(client: httpx.Client, name: str, timeout_s: float) -> float | None:
    """Seconds until ``name`` is in the index as READY or UNAVAILABLE, or None."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        with contextlib.suppress(httpx.HTTPError, ValueError):
            rows = client.post("/v2/repository/index", json={}, timeout=5).json()
            states = {r.get("state") for r in rows if r["name"] == name}
            if states and states <= {"READY", "UNAVAILABLE"}:
                return time.monotonic() - started
        time.sleep(0.2)
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--variant", choices=VARIANTS, required=True)
    parser.add_argument("--depth", type=int, default=1800)
    parser.add_argument("--mib", type=float, default=64)
    parser.add_argument("--settle", type=float, default=3.0, help="seconds of polls after the attack")
    parser.add_argument("--apply-timeout", type=float, default=30.0)
    parser.add_argument("--kill-after", type=float, default=60.0)
    parser.add_argument("--server-pythonpath", help="PYTHONPATH of the server (another checkout: "
                        "the before figures); default: this one's")
    args = parser.parse_args()
    env = None
    if args.server_pythonpath:  # `python -m` puts the working folder first on the server's path
        env = dict(os.environ, PYTHONPATH=args.server_pythonpath)
        os.chdir(args.server_pythonpath)
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "repo"
        folder = build(repo, args.variant)
        process = ServerProcess([f"--model-repository={repo}", "--model-control-mode=poll",
                                 "--repository-poll-secs=0.2", "--exit-timeout-secs=5",
                                 "--allow-grpc=false", "--allow-metrics=false"], timeout_s=120, env=env)
        base = f"http://127.0.0.1:{process.port}"
        health = HealthPoller(base + "/v2/health/live")
        try:
            with httpx.Client(base_url=base) as client:
                health.start()
                attack(repo, folder, args.variant, args.depth, args.mib)
                name = {"bigconfig": "big", "endless": "endless"}.get(args.variant, "victim")
                started = time.monotonic()
                if args.variant != "bigconfig":  # bigconfig: other changes while big loads
                    time.sleep(args.settle)
                atomic_write(repo / "other" / "config.pbtxt", add_sub_config("other", 4, 1))
                applied = wait_applied(client, args.apply_timeout)
                settled = wait_settled(client, name, 900) if args.variant == "bigconfig" else None
                if settled is not None:
                    settled = time.monotonic() - started
                row = victim_row(client, name)
            health.stop.set()
            health.join(10)
            started = time.monotonic()
            process.process.send_signal(signal.SIGTERM)
            try:
                status: int | str = process.process.wait(args.kill_after)
                exit_text = f"{time.monotonic() - started:.1f} s (status {status})"
            except subprocess.TimeoutExpired:
                process.process.kill()
                process.process.wait()
                exit_text = f"hung ({args.kill_after:.0f} s, SIGKILL)"
        finally:
            health.stop.set()
            for path in PLANTED:
                release_fifo(path)
            process.stop(signal.SIGKILL, 5)
            if args.variant == "deep":
                remove_tree(folder / "deep")
        applied_text = f"yes, {applied:.1f} s" if applied is not None else f"no ({args.apply_timeout:.0f} s)"
        settled_text = f"{settled:.1f} s" if settled is not None else "-"
        print(f"| {args.variant} | {row[:160]} | {applied_text} | {exit_text} | {settled_text} | "
              f"{health.worst * 1000:.0f} ms, {health.failures} failed |")


if __name__ == "__main__":
    main()
