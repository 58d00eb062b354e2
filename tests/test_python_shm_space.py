"""The start-up warning when ``/dev/shm`` is small for the Python-backend stubs
(:mod:`workbench.backends.python.shm_space`)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from workbench.backends.python.shm_space import BYTES_PER_STUB, ShmBudget, shm_size_bytes, small_shm_warning

MIB = 2**20


def test_the_warning_names_the_size_the_need_and_the_fix() -> None:
    warning = small_shm_warning(4, 64 * MIB)
    assert warning is not None
    assert "/dev/shm is 64 MiB, smaller than the 512 MiB that 4 Python-backend" in warning
    assert "--shm-size" in warning and "emptyDir" in warning
    assert small_shm_warning(4, 4 * BYTES_PER_STUB) is None  # exactly enough
    assert small_shm_warning(1, None) is None  # size unknown: no guess


def test_the_budget_warns_once_when_the_live_stubs_outgrow_it(caplog: pytest.LogCaptureFixture) -> None:
    budget = ShmBudget(size_of=lambda folder: 300 * MIB)
    with caplog.at_level(logging.WARNING, logger="workbench.backends.python.shm_space"):
        assert budget.started() is None and budget.started() is None  # 256 MiB: fits
        budget.stopped()
        assert budget.started() is None  # 2 live again
        warning = budget.started()  # 3 live: 384 MiB
        assert warning is not None and "384 MiB that 3" in warning
        assert budget.started() is None  # once per process
    assert [r.getMessage() for r in caplog.records] == [warning]


def test_the_size_is_the_file_system_size(tmp_path: Path) -> None:
    size = shm_size_bytes(str(tmp_path))
    assert size is not None and size > 0
    assert shm_size_bytes(str(tmp_path / "missing")) is None
