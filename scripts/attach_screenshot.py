"""The README's attach screenshot (docs/images/attach.png), made as a person would: a
headless ``workbench serve`` with a python add_sub (its repository API behind a key), a
Jupyter server with the workbench extension on a temporary copy of digits_mlp, the dashboard
in headless Chromium, the server's URL and key typed into "Attach to a server", Attach, a
little traffic, the Models tab once the attached server's rows show.

    python scripts/attach_screenshot.py [--out docs/images/attach.png]

Needs the `dev` and `jupyter` extras and Chromium (`make test` installs them).
"""

from __future__ import annotations

from pathlib import Path

import httpx

from workbench.testing.attach import ADMIN_HEADER, server_flags, write_python_add_sub
from workbench.testing.process import ServerProcess
from workbench.testing.screenshots import dashboard_page, save, shot_arguments, work_folder

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    args = shot_arguments(__doc__, "attach.png")
    with work_folder("attach-shot-", args.repository) as work:
        headless = ServerProcess(server_flags(write_python_add_sub(work / "remote")))
        try:
            url = f"http://127.0.0.1:{headless.port}"
            body = {"inputs": [{"name": n, "shape": [1, 4], "datatype": "FP32", "data": [1.0] * 4}
                               for n in ("INPUT0", "INPUT1")]}
            with dashboard_page([f"--Workbench.model_repository={work / 'models'}", "--Workbench.open_ports=False"],
                                work / "home", 1300, 700) as page, httpx.Client(base_url=url, timeout=30) as client:
                page.locator(".tabulator-cell", has_text="digits_mlp").first.wait_for(timeout=120_000)
                page.get_by_label("Attach to a server").fill(url)
                page.get_by_label("/metrics URLs (optional)").fill(headless.metrics_url)
                page.get_by_label("Headers (optional, this session only)").fill(
                    "; ".join(f"{k}: {v}" for k, v in ADMIN_HEADER.items()))
                page.get_by_role("button", name="Attach").click()
                page.get_by_text(f"{url}: live, ready").wait_for(timeout=60_000)
                for _ in range(3):  # a little traffic, seen in the next second's columns
                    for _ in range(200):
                        client.post("/v2/models/add_sub/infer", json=body).raise_for_status()
                    page.wait_for_timeout(1000)
                page.locator(".tabulator-cell", has_text="python").first.wait_for(timeout=60_000)
                save(page, args.out, full_page=False)
        finally:
            headless.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
