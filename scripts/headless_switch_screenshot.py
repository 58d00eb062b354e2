"""The README's switch-to-headless screenshot (docs/images/headless-switch.png), made as a
person would: a Jupyter server with the workbench extension serving the v2 ports (free ones)
over a temporary copy of add_sub, the dashboard in headless Chromium, the Headless tab, a
click on "Switch to headless", the page once the headless ``workbench serve`` holds the
ports (its state, steps and command line); then "Switch back".

    python scripts/headless_switch_screenshot.py [--out docs/images/headless-switch.png]

Needs the `dev` and `jupyter` extras and Chromium (`make test` installs them).
"""

from __future__ import annotations

import argparse
import re
import shutil
import tempfile
from pathlib import Path

from workbench.testing.reload import write_add_sub
from workbench.testing.screenshots import dashboard_page

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(ROOT / "docs" / "images" / "headless-switch.png"))
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="switch-shot-"))
    try:
        write_add_sub(work / "models")
        with dashboard_page([f"--Workbench.model_repository={work / 'models'}", "--Workbench.open_ports=True",
                             "--Workbench.http_port=0", "--Workbench.grpc_port=0", "--Workbench.metrics_port=0"],
                            work / "home", 1300, 820) as page:
            page.locator(".bk-tab", has_text="Headless").first.click()
            page.get_by_role("button", name="Switch to headless").click()
            page.get_by_text(re.compile(r"^headless: ")).wait_for(timeout=120_000)
            page.get_by_text("A systemd unit").wait_for(timeout=10_000)
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=args.out, full_page=False)
            page.get_by_role("button", name="Switch back").click()
            page.get_by_text(re.compile(r"^in-process: ")).wait_for(timeout=120_000)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
