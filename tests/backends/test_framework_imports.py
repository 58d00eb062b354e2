"""Backends import their frameworks one at a time across the model-load threads.

The race seen on the sample repository: ``cancer_xgboost`` (fil) failed to load with
"partially initialized module 'torch' has no attribute 'Tensor'" while ``digits_torchscript``
imported torch on another load thread. Reproduced here with two fake frameworks at the backend
boundary: ``wb_race_torch`` pauses in the middle of its import (until released), and
``wb_race_xgboost`` reads ``wb_race_torch.Tensor`` from ``sys.modules`` while it imports (as
array-API helpers look at torch), then releases the first one.
"""

from __future__ import annotations

import logging
import sys
import threading
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from workbench.backends import fil_predictors
from workbench.common.errors import ModelLoadError
from workbench.engine.models.loader import import_frameworks

TORCH = """
import wb_race_control as control
control.torch_started.set()
control.release_torch.wait(30)  # a guard: the test releases it (a hang fails, not blocks)
Tensor = type("Tensor", (), {})
"""

XGBOOST = """
import sys
import wb_race_control as control
try:
    torch = sys.modules.get("wb_race_torch")
    TENSOR = torch.Tensor if torch is not None else None
finally:
    control.release_torch.set()
"""


class _ReleaseOnWait(logging.Handler):
    """Releases the paused import once the second import says it waits for the first."""

    def __init__(self, release: threading.Event) -> None:
        super().__init__(logging.DEBUG)
        self.on_wait = release

    def emit(self, record: logging.LogRecord) -> None:
        if "waits for another thread's framework import" in record.getMessage():
            self.on_wait.set()


@pytest.fixture
def fake_frameworks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[types.SimpleNamespace]:
    (tmp_path / "wb_race_torch.py").write_text(TORCH)
    (tmp_path / "wb_race_xgboost.py").write_text(XGBOOST)
    monkeypatch.syspath_prepend(str(tmp_path))
    control = types.SimpleNamespace(torch_started=threading.Event(), release_torch=threading.Event())
    monkeypatch.setitem(sys.modules, "wb_race_control", control)
    for name in ("wb_race_torch", "wb_race_xgboost"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    handler = _ReleaseOnWait(control.release_torch)
    logger = logging.getLogger("workbench.common.frameworks")
    level = logger.level
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    monkeypatch.setitem(fil_predictors.LIBRARIES, "race_type", ("wb_race_xgboost", "wb-race-xgboost"))
    yield control
    logger.removeHandler(handler)
    logger.setLevel(level)
    control.release_torch.set()
    for name in ("wb_race_torch", "wb_race_xgboost"):
        sys.modules.pop(name, None)


def test_a_fil_load_waits_for_torch_imported_by_another_load_thread(
    fake_frameworks: types.SimpleNamespace, tmp_path: Path
) -> None:
    torch_load = threading.Thread(target=import_frameworks, args=(("wb_race_torch",),))
    torch_load.start()  # what the pytorch backend's load does before its instances
    try:
        assert fake_frameworks.torch_started.wait(30)
        # the fil load on another thread, while torch is half imported
        with pytest.raises(ModelLoadError, match="model file not found"):
            fil_predictors.load_predictor("cancer_xgboost", "race_type", tmp_path / "absent.json", 1)
    finally:
        fake_frameworks.release_torch.set()
        torch_load.join(30)
    assert sys.modules["wb_race_xgboost"].TENSOR is sys.modules["wb_race_torch"].Tensor
