"""The README's Live tab screenshot (docs/images/live-tab.png), made as a person would: a
Jupyter server with the workbench extension on a temporary copy of digits_mlp (versions 1 and
2), the dashboard in headless Chromium, the Live tab on digits_mlp/2, then 25 s of network
traffic on both versions (4 HTTP clients each), the page 23 s into it.

    python scripts/live_screenshot.py [--out docs/images/live-tab.png]

Needs the `dev` and `jupyter` extras and Chromium (`make test` installs them).
"""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import httpx

from workbench.testing.screenshots import OPEN_PORTS, dashboard_session, save, shot_arguments, v2_ports, work_folder

ROOT = Path(__file__).resolve().parents[1]
#: seconds of traffic before the screenshot, and clients per version
BURST_S, CLIENTS = 25.0, 4


def traffic(http_port: int, version: str, until: float) -> None:
    """digits_mlp requests of batch 1 on ``version`` until ``until`` (monotonic s)."""
    body = {"inputs": [{"name": "pixels", "shape": [1, 64], "datatype": "FP32", "data": [0.5] * 64}]}
    with httpx.Client(base_url=f"http://127.0.0.1:{http_port}", timeout=30) as client:
        while time.monotonic() < until:
            client.post(f"/v2/models/digits_mlp/versions/{version}/infer", json=body).raise_for_status()


def main() -> int:
    args = shot_arguments(__doc__, "live-tab.png")
    with (work_folder("live-shot-", args.repository) as work,
          dashboard_session([f"--Workbench.model_repository={work / 'models'}", *OPEN_PORTS],
                            work / "home", 1400, 1500) as (page, jupyter)):
        http_port = v2_ports(jupyter)["http"]
        page.locator(".tabulator-cell", has_text="digits_mlp").first.wait_for(timeout=120_000)
        page.locator(".bk-tab", has_text="Live").first.click()
        page.get_by_label("Model version").select_option("digits_mlp/2")
        page.get_by_text("digits_mlp/2: no traffic").first.wait_for(timeout=60_000)
        until = time.monotonic() + BURST_S
        threads = [threading.Thread(target=traffic, args=(http_port, v, until))
                   for v in ("1", "2") for _ in range(CLIENTS)]
        for thread in threads:
            thread.start()
        page.wait_for_timeout((BURST_S - 2) * 1000)  # the shot while the traffic runs
        page.locator(".workbench-live-diagnosis").filter(
            has_text=re.compile(r"Why p99: (?!No traffic)")).first.wait_for(timeout=30_000)
        save(page, args.out, full_page=True)
        for thread in threads:
            thread.join()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
