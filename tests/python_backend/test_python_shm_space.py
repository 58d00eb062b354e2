"""The start-up warning when ``/dev/shm`` is small for the Python-backend stubs
(:mod:`workbench.backends.python.shm_space`), and a request that meets a full ``/dev/shm``
(Triton's "Failed to increase the shared memory pool size", the model serving on)."""

from __future__ import annotations

import errno
import logging
import os
from pathlib import Path

import numpy as np
import pytest

from workbench import InferenceRequest, InternalError, Tensor
from workbench.backends.python.shm_space import BYTES_PER_STUB, ShmBudget, shm_size_bytes, small_shm_warning
from workbench.testing.python_backend import python_models_server

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


# ------------------------------------------------- a full /dev/shm fails the request only
TRITON_TEXT = "Failed to increase the shared memory pool size to "


def _limit_fallocate(monkeypatch: pytest.MonkeyPatch, limit: int) -> None:
    """This process (the server's side of the stubs) sees a /dev/shm of ``limit`` bytes: a
    segment larger than that fails with ENOSPC, as tmpfs refuses such a range."""
    real = os.posix_fallocate

    def limited(fd: int, offset: int, length: int) -> None:
        if offset + length > limit:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(fd, offset, length)

    monkeypatch.setattr(os, "posix_fallocate", limited)


async def test_a_full_dev_shm_fails_the_request_with_tritons_text_and_the_model_serves_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Triton's python_test ``test_growth_error`` on a small scale: the server's side fails
    to place a 64 MiB input (limit 32 MiB), the stub fails to place a 16 MiB output (limit
    4 MiB), each with Triton's text; then a 2 MiB request is answered. Before: the texts
    were "[Errno 28] No space left on device" (server side) and "OSError: [Errno 28] ..."."""
    _limit_fallocate(monkeypatch, 32 * MIB)

    def request(size: int) -> InferenceRequest:
        return InferenceRequest("shm_limited", [Tensor("INPUT0", "UINT8", np.full(size, 7, np.uint8))])

    async with python_models_server(tmp_path, "shm_limited") as server:
        for size in (64 * MIB, 16 * MIB):
            with pytest.raises(InternalError) as caught:
                await server.infer(request(size))
            assert TRITON_TEXT in caught.value.message
            assert "use '--shm-size' flag" in caught.value.message
        answer = await server.infer(request(2 * MIB))
        assert answer.outputs[0].data.shape == (2 * MIB,) and int(answer.outputs[0].data[-1]) == 7


async def test_a_bls_input_that_does_not_fit_comes_back_as_an_error_response(tmp_path: Path) -> None:
    """Triton's ``InferRequest::Exec``: an input that cannot be placed in shared memory makes
    ``exec()`` (and ``exec(decoupled=True)``'s one response) return an error response with
    the text, not raise (L0_backend_python bls ``bls_memory``, which checks
    ``has_error()`` then the text); the stub goes on with BLS. Before: ``SharedMemoryFull``
    was raised out of ``exec``."""
    async with python_models_server(tmp_path, "bls_shm_limited", "identity") as server:
        answer = await server.infer(InferenceRequest(
            "bls_shm_limited", [Tensor("ELEMENTS", "INT64", np.array([4 * MIB], np.int64))]))
        plain, decoupled, small = (e.decode() for e in answer.outputs[0].data)
        for text in (plain, decoupled):
            assert text.startswith(TRITON_TEXT) and "use '--shm-size' flag" in text, text
        assert small == ""
