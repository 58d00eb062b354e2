"""The README's switch-to-headless screenshot (docs/images/headless-switch.png), made as a
person would: a Jupyter server with the workbench extension serving the v2 ports (free ones)
over a temporary copy of add_sub, the dashboard in headless Chromium, the Headless tab, a
click on "Switch to headless", the page once the headless ``workbench serve`` holds the
ports (its state, steps and command line); then "Switch back".

    python scripts/headless_switch_screenshot.py [--out docs/images/headless-switch.png]

Needs the `dev` and `jupyter` extras and Chromium (`make test` installs them).
"""

from __future__ import annotations

import re
from pathlib import Path

from workbench.testing.reload import write_add_sub
from workbench.testing.screenshots import OPEN_PORTS, dashboard_page, save, shot_arguments, work_folder

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    args = shot_arguments(__doc__, "headless-switch.png")
    with work_folder("switch-shot-") as work:
        write_add_sub(work / "models")
        with dashboard_page([f"--Workbench.model_repository={work / 'models'}", *OPEN_PORTS],
                            work / "home", 1300, 820) as page:
            page.locator(".bk-tab", has_text="Headless").first.click()
            page.get_by_role("button", name="Switch to headless").click()
            page.get_by_text(re.compile(r"^headless: ")).wait_for(timeout=120_000)
            page.get_by_text("A systemd unit").wait_for(timeout=10_000)
            save(page, args.out, full_page=False)
            page.get_by_role("button", name="Switch back").click()
            page.get_by_text(re.compile(r"^in-process: ")).wait_for(timeout=120_000)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
