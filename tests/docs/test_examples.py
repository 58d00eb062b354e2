"""The client examples (``examples/*.py``) against a real ``workbench serve`` process."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from workbench.testing.process import ServerProcess

ROOT = Path(__file__).resolve().parents[2]
CLASSIFY = ROOT / "examples" / "classify_digits.py"


def _classify_digits():
    spec = importlib.util.spec_from_file_location("classify_digits", CLASSIFY)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def digits_16(sample_repository: Path, tmp_path_factory: pytest.TempPathFactory):
    """``workbench serve`` on a copy of digits_mlp whose config was edited to max_batch_size 16
    (as the dashboard's Config tab does)."""
    repo = tmp_path_factory.mktemp("examples")
    shutil.copytree(sample_repository / "digits_mlp", repo / "digits_mlp")
    config = repo / "digits_mlp" / "config.pbtxt"
    config.write_text(config.read_text().replace("max_batch_size: 64", "max_batch_size: 16"))
    process = ServerProcess([f"--model-repository={repo}", "--allow-grpc=false", "--allow-metrics=false"])
    try:
        yield process
    finally:
        process.stop()


def test_classify_digits_follows_an_edited_max_batch_size(digits_16, capsys) -> None:
    url = digits_16.url
    assert _classify_digits().main(["--url", url]) == 0
    out = capsys.readouterr().out
    assert "requests of at most 16 rows (the model's max_batch_size)" in out
    assert "accuracy" in out and "ok" in out


def test_classify_digits_refuses_a_batch_above_the_models_maximum(digits_16) -> None:
    url = digits_16.url
    run = subprocess.run([sys.executable, str(CLASSIFY), "--url", url, "--batch-size", "32"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2, run.stderr
    assert "--batch-size 32 is above digits_mlp's max_batch_size 16" in run.stderr
    assert "Traceback" not in run.stderr
