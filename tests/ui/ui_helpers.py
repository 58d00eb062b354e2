"""Helpers shared by the UI tests (fixtures are in conftest.py)."""

from __future__ import annotations

import numpy as np

from workbench import InferenceRequest, Server, Tensor


def add_sub_request(batch: int = 1) -> InferenceRequest:
    a = np.ones((batch, 16), np.float32)
    return InferenceRequest("add_sub", [Tensor("INPUT0", "FP32", a), Tensor("INPUT1", "FP32", a)])


async def index_states(server: Server, name: str) -> dict[str, tuple[str, str]]:
    """version -> (state, reason) of ``name`` in the repository index."""
    return {row.get("version", ""): (row.get("state", ""), row.get("reason", ""))
            for row in await server.repository_index() if row["name"] == name}
