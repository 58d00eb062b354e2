"""The README's Tuning tab screenshot (docs/images/tuning-tab.png), made as a person would:
a Jupyter server with the workbench extension on a temporary copy of digits_mlp, the
dashboard in headless Chromium, the Tuning tab, a quick search under a 5 ms p99 SLA, the
page once the verdict shows.

    python scripts/tuning_screenshot.py [--out docs/images/tuning-tab.png]

Needs the `dev` and `jupyter` extras and Chromium (`make test` installs them).
"""

from __future__ import annotations

import re
from pathlib import Path

from workbench.testing.screenshots import dashboard_page, save, shot_arguments, work_folder

ROOT = Path(__file__).resolve().parents[1]
#: what the person types into the form (label -> text)
FIELDS = {"Load levels (1, 2, 4 or start:end or start:end:step)": "1:16", "SLA (ms, 0 = none)": "5",
          "Window (ms)": "1000", "Warm-up (ms)": "300"}
SPACE = "instance_count=1,2 max_queue_delay_us=0,500"


def main() -> int:
    args = shot_arguments(__doc__, "tuning-tab.png")
    with (work_folder("tuning-shot-", args.repository) as work,
          dashboard_page([f"--Workbench.model_repository={work / 'models'}", "--Workbench.open_ports=False"],
                         work / "home", 1300, 1500) as page):
        page.locator(".tabulator-cell", has_text="digits_mlp").first.wait_for(timeout=120_000)
        page.locator(".bk-tab", has_text="Tuning").first.click()
        page.get_by_label("Model", exact=True).locator("visible=true").select_option("digits_mlp")
        page.get_by_text("digits_mlp is served now with").wait_for(timeout=60_000)
        space = page.get_by_label(re.compile("^Search space")).locator("visible=true")
        space.fill(SPACE)
        space.press("Tab")
        for label, value in FIELDS.items():
            field = page.get_by_label(label, exact=True).locator("visible=true")
            field.fill(value)
            field.press("Enter")
        page.get_by_role("button", name="Run", exact=True).click()
        page.get_by_text(re.compile(r"^done: \d+ points measured")).wait_for(timeout=900_000)
        page.wait_for_timeout(1500)  # the plot's last redraw
        save(page, args.out, full_page=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
