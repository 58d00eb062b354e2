"""UI fixtures: a real Server in explicit mode on temporary copies of real models (add_sub,
digits_mlp from the sample repository, which is never written)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import pytest_asyncio

from workbench import Server, ServerOptions
from workbench.testing.reload import write_add_sub
from workbench.ui.shared.store import EngineStore


@pytest.fixture
def repository(tmp_path: Path, sample_repository: Path) -> Path:
    """add_sub (one CPU instance, max_batch_size 8, dynamic batching) and digits_mlp (two
    versions, latest-2 policy), copied."""
    repo = tmp_path / "models"
    write_add_sub(repo, instances=1)
    shutil.copytree(sample_repository / "digits_mlp", repo / "digits_mlp")
    return repo


@pytest.fixture
def with_accumulator(repository: Path, sample_repository: Path) -> Path:
    """The repository with a copy of the sample accumulator too (sequence-batched, not
    loaded)."""
    shutil.copytree(sample_repository / "accumulator", repository / "accumulator")
    return repository


def explicit_options(repository: Path, **extra) -> ServerOptions:
    return ServerOptions(model_repository=[str(repository)], model_control_mode="explicit",
                         load_model=["add_sub", "digits_mlp"], **extra)


@pytest_asyncio.fixture
async def server(repository: Path):
    """The engine in explicit mode with both models loaded."""
    async with Server(explicit_options(repository)) as engine:
        yield engine


@pytest_asyncio.fixture
async def store(server: Server) -> EngineStore:
    return EngineStore(server)
