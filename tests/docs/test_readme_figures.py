"""README.md's measured figures are the latest ones bench/RESULTS.md records (a new user reads the
README's time for a first ``make serve``; the measurement behind it lives in RESULTS.md)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_first_make_serve_time_is_the_latest_measured() -> None:
    results = (ROOT / "bench" / "RESULTS.md").read_text()
    section = results.split("## First make serve", 1)[1].split("\n## ", 1)[0]
    latest = re.search(r"\*\*Latest \(([^)]*)\): (\d+ min \d+ s)\*\*", section)
    assert latest is not None, "RESULTS.md's First make serve section leads with its latest run"
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert f'took {latest.group(2)} to "Started"' in readme
