"""What `make setup` leaves in the project's venv (the Makefile's set-up recipe)."""
from __future__ import annotations

import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(Path(sys.prefix).resolve() != (ROOT / ".venv").resolve(),
                    reason="runs in the venv `make setup` made (.venv)")
@pytest.mark.skipif(shutil.which("nvidia-smi") is not None,
                    reason="a GPU machine: tests/gpu/run_gpu_checks.sh installs a CUDA torch here")
def test_setup_installs_a_cpu_torch_and_no_cuda_wheels() -> None:
    """The set-up installs torch on its own first, so pip takes the CPU build offered; resolved
    with the dev extra it took PyPI's CUDA build (4.8 GB of nvidia-* wheels in a 6.4 GB venv)."""
    torch = pytest.importorskip("torch")
    assert torch.version.cuda is None, f"a CUDA build of torch: {torch.__version__}"
    cuda_wheels = sorted(d.metadata["Name"] for d in metadata.distributions()
                         if d.metadata["Name"].lower().startswith(("nvidia-cu", "nvidia-nccl")))
    assert cuda_wheels == []


def make_dry_run(target: str, tmp_path: Path) -> list[str]:
    """The commands ``make TARGET`` runs on a machine without a venv (``make -n``)."""
    result = subprocess.run(["make", "-n", target, f"VENV={tmp_path / 'venv'}"], cwd=ROOT,
                            capture_output=True, text=True, timeout=60, check=True)
    return result.stdout.splitlines()


def pip_installs(commands: list[str]) -> list[str]:
    return [line for line in commands if " -m pip install " in line]


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_serve_installs_the_serving_set_and_the_test_targets_add_the_dev_extra(tmp_path: Path) -> None:
    """`make serve` installs the samples extra, not the test tools (it installed `.[dev]`: a 5.3 GB
    venv with Playwright, moto, mypy, ...); `make test-fast` (and `make lint`) add `.[dev]`. Each
    install says first what it installs, and shows pip's own output and progress bars (it was
    piped through a grep that left 228 s without a line while pip installed 300 packages)."""
    serve = make_dry_run("serve", tmp_path)
    installs = pip_installs(serve)
    assert any("-e '.[samples]'" in line for line in installs)
    assert not any("dev]" in line for line in serve)
    for line in installs:
        assert "--progress-bar on" in line and "| " not in line
        assert serve[serve.index(line) - 1].startswith('echo "')  # announced
    assert any("-e '.[dev]'" in line for line in pip_installs(make_dry_run("test-fast", tmp_path)))
