"""The README's Rollout tab screenshot (docs/images/rollout-tab.png), made as a person would:
a Jupyter server with the workbench extension on a temporary copy of digits_mlp (v1 and v2),
the dashboard in headless Chromium, the Rollout tab, a 90/10 split with half of the primary
requests mirrored on v2 typed and set, the digits test split sent over the v2 HTTP port, the
page once the report shows it.

    python scripts/rollout_screenshot.py [--out docs/images/rollout-tab.png]

Needs the `dev` and `jupyter` extras, Chromium and the sample models (`make test` / `make setup`).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

import httpx

from workbench.testing.screenshots import OPEN_PORTS, dashboard_session, v2_ports

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
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(ROOT / "docs" / "images" / "rollout-tab.png"))
    parser.add_argument("--repository", default=str(ROOT / "sample_models" / "repository"))
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rollout-shot-"))
    try:
        shutil.copytree(Path(args.repository) / "digits_mlp", work / "models" / "digits_mlp")
        with dashboard_session([f"--Workbench.model_repository={work / 'models'}", *OPEN_PORTS],
                               work / "home", 1300, 900) as (page, jupyter):
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
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=args.out, full_page=False)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
