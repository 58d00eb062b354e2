"""`make models` (sample_models/build.py) is never silent for long (issue 35): each model's
build is announced before it starts (text_classifier's takes a minute and more on 2 cores,
with its own progress lines: ``sample_models/progress.py``), then its result."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "sample_models"))

import progress  # noqa: E402  sample_models/, put on sys.path above


def test_a_build_is_announced_before_it_runs(tmp_path: Path) -> None:
    command = [sys.executable, str(ROOT / "sample_models" / "build.py"), "--out", str(tmp_path),
               "--model", "tokenizer"]
    lines = subprocess.run(command, check=True, capture_output=True, text=True).stdout.splitlines()
    announced = lines.index("tokenizer: building (not built yet) ...")
    built = next(i for i, line in enumerate(lines) if line.startswith("tokenizer: built in"))
    assert announced < built, lines


def test_progress_comes_in_tenths() -> None:
    assert progress.chunks(1000) == [(s, min(s + 100, 1000)) for s in range(0, 1000, 100)]
    assert progress.chunks(100) == [(0, 64), (64, 100)]  # no slice under 64 sentences but the last
    assert progress.chunks(0) == []
