"""How long a Jupyter host's stop takes (issue 35): ``jupyter server`` with the workbench
extension on the sample models (v2 ports open, as ``make jupyter``), SIGTERM once the engine
runs; times from the signal to "all models unloaded; exiting" (the drain) and to the exit,
with ``c.Workbench.exit_at_once`` on and off, alternating round by round (medians printed).

    python bench/jupyter_stop.py [--rounds 2] [--repository sample_models/repository]

Run under ``flock /tmp/bench.lock`` on a shared machine. Each start loads every sample model
(~40-90 s here).
"""

from __future__ import annotations

import argparse
import re
import signal
import statistics
import tempfile
import time
from pathlib import Path

from workbench.testing.process import JupyterProcess

ROOT = Path(__file__).resolve().parents[1]
ENABLE_FILE = ROOT / "jupyter-config" / "jupyter_server_config.d" / "workbench.json"


def one_stop(repository: str, exit_at_once: bool) -> tuple[float, float]:
    """(drain s, exit s) after SIGTERM, for one start of the server."""
    with tempfile.TemporaryDirectory() as home:
        jupyter = JupyterProcess(
            [f"--Workbench.model_repository={repository}", "--Workbench.open_ports=True",
             "--Workbench.http_port=0", "--Workbench.grpc_port=0", "--Workbench.metrics_port=0",
             f"--Workbench.exit_at_once={exit_at_once}"], home=Path(home), enable_file=ENABLE_FILE, timeout_s=600)
        seen = len(jupyter.lines)
        sent = time.monotonic()
        jupyter.process.send_signal(signal.SIGTERM)
        jupyter.wait_for_log(re.escape("all models unloaded; exiting"), timeout_s=120, since=seen)
        drained = time.monotonic() - sent
        status = jupyter.stop(timeout_s=120)
        exited = time.monotonic() - sent
        assert status == 0, jupyter.log[-2000:]
        return drained, exited


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--repository", default=str(ROOT / "sample_models" / "repository"))
    args = parser.parse_args()
    results: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    for round_ in range(args.rounds):
        for exit_at_once in ((True, False) if round_ % 2 == 0 else (False, True)):
            drained, exited = one_stop(args.repository, exit_at_once)
            results[exit_at_once].append((drained, exited))
            print(f"round {round_ + 1} exit_at_once={exit_at_once}: drained {drained:.2f} s, exited {exited:.2f} s",
                  flush=True)
    for exit_at_once, rows in results.items():
        print(f"exit_at_once={exit_at_once}: median drain {statistics.median(r[0] for r in rows):.2f} s, "
              f"median exit {statistics.median(r[1] for r in rows):.2f} s ({len(rows)} stops)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
