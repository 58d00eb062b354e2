"""The README's Models and Config tab screenshots (docs/images/models-tab.png,
docs/images/config-tab.png), made as a person would: a Jupyter server with the workbench
extension on temporary copies of a few sample models, the dashboard in headless Chromium; the
Models tab once every model is READY, then the Config tab on digits_mlp with max_batch_size
retyped from 64 to 32 in the editor (its diff shown, nothing applied).

    python scripts/models_config_screenshots.py [--out docs/images/models-tab.png]

``--out`` names the Models shot; the Config shot goes beside it as config-tab.png. Needs the
`dev` and `jupyter` extras and Chromium (`make test` installs them).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from workbench.testing.screenshots import dashboard_session, save, shot_arguments, work_folder

#: the sample models copied beside digits_mlp: a sequence model, a tree model, a Python model
OTHERS = ("accumulator", "cancer_xgboost", "tokenizer")
#: how long a person waits for the page's next state, ms
WAIT_MS = 180_000


def main() -> int:
    args = shot_arguments(__doc__, "models-tab.png")
    with work_folder("models-config-shot-", args.repository) as work:
        for name in OTHERS:
            shutil.copytree(Path(args.repository) / name, work / "models" / name)
        with dashboard_session([f"--Workbench.model_repository={work / 'models'}"], work / "home",
                               1400, 900) as (page, _jupyter):
            for name in ("digits_mlp", *OTHERS):
                page.locator(".tabulator-row", has_text=name).filter(has_text="READY").first.wait_for(timeout=WAIT_MS)
            save(page, args.out)

            page.locator(".bk-tab", has_text="Config").first.click()
            page.get_by_role("button", name="Apply (write + reload)").wait_for(timeout=WAIT_MS)
            page.get_by_label("Model", exact=True).filter(visible=True).first.select_option("digits_mlp")
            editor = page.locator(".ace_editor").filter(visible=True).first
            # at the line's place: Ace's content layer over the lines takes the click, as a person's
            editor.locator(".ace_line", has_text="max_batch_size: 64").first.click(force=True)
            page.keyboard.press("End")
            page.keyboard.press("Shift+Home")
            page.keyboard.type("max_batch_size: 32")
            page.get_by_text("+max_batch_size: 32").first.wait_for(timeout=WAIT_MS)
            save(page, str(Path(args.out).with_name("config-tab.png")), full_page=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
