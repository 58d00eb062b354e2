"""The README's Rollout tab screenshot (docs/images/rollout-tab.png), made as a person would:
a Jupyter server with the workbench extension on a temporary copy of digits_mlp (v1 and v2),
the dashboard in headless Chromium, the Rollout tab, a 90/10 split with half of the primary
requests mirrored on v2 typed and set, the digits test split sent over the v2 HTTP port, the
page once the report shows it.

    python scripts/rollout_screenshot.py [--out docs/images/rollout-tab.png]

Needs the `dev` and `jupyter` extras, Chromium and the sample models (`make test` / `make setup`).
"""

from __future__ import annotations

import sys
from pathlib import Path

import httpx

from workbench.testing.screenshots import OPEN_PORTS, dashboard_session, save, shot_arguments, v2_ports, work_folder

ROOT = Path(__file__).resolve().parents[1]
#: what the person types into the form (label -> text)
FIELDS = {"Weights": "1:90, 2:10", "Mirror %": "50"}


def send_digits(http_port: int) -> None:
    """The digits test split, one request per digit, on the v2 HTTP port."""
    sys.path.insert(0, str(ROOT / "sample_models"))
    from build_digits import load_split

    with httpx.Client(base_url=f"http://127.0.0.1:{http_port}", timeout=30) as v2:
        for row in load_split().x_test:
            body = {"inputs": [{"name": "pixels", "shape": [1, 64], "datatype": "FP32", "data": row.tolist()}]}
            v2.post("/v2/models/digits_mlp/infer", json=body).raise_for_status()


def main() -> int:
    args = shot_arguments(__doc__, "rollout-tab.png")
    with (work_folder("rollout-shot-", args.repository) as work,
          dashboard_session([f"--Workbench.model_repository={work / 'models'}", *OPEN_PORTS],
                            work / "home", 1300, 900) as (page, jupyter)):
        page.locator(".tabulator-cell", has_text="digits_mlp").first.wait_for(timeout=120_000)
        page.locator(".bk-tab", has_text="Rollout").first.click()
        page.get_by_label("Model", exact=True).locator("visible=true").select_option("digits_mlp")
        page.get_by_label("Candidate", exact=True).select_option("2")
        for label, value in FIELDS.items():
            field = page.get_by_label(label, exact=True)
            field.fill(value)
            field.press("Enter")
        page.get_by_role("button", name="Set rollout", exact=True).click()
        page.get_by_text("Rollout of 'digits_mlp' set.").wait_for(timeout=60_000)
        send_digits(v2_ports(jupyter)["http"])
        page.locator(".workbench-rollout-report tr", has_text="logits").wait_for(timeout=60_000)
        page.wait_for_timeout(2500)  # the report's next refreshes
        save(page, args.out, full_page=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
