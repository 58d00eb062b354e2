"""What `make setup` leaves in the project's venv (the Makefile's set-up recipe)."""
from __future__ import annotations

import shutil
import sys
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


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
