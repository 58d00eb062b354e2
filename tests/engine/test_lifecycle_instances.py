"""Model instances as Triton creates them (issue 19 item 13): the instances of one model
version initialise concurrently (a model with 4 instances does not take 4x one instance:
the fake backend's loads meet at a barrier of 4, which only concurrent loads can pass).

The fake backend counts initialize / finalize calls (the real engine runs around it).
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from workbench import Server, ServerOptions
from workbench.testing.fake_backend import BEHAVIOUR, fake_request, write_fake_model

pytestmark = pytest.mark.usefixtures("fake_backend")



async def test_the_instances_of_a_model_initialise_concurrently(tmp_path: Path) -> None:
    write_fake_model(tmp_path, "m", count=4)
    BEHAVIOUR.load_barrier = threading.Barrier(4, timeout=5)  # broken unless 4 wait at once
    options = ServerOptions(model_repository=[str(tmp_path)], model_control_mode="explicit")
    async with Server(options) as server:
        await server.load_model("m")
        assert BEHAVIOUR.initialized == {f"m_0_{i}": 1 for i in range(4)}
        assert (await server.infer(fake_request("m", 2.0))).outputs[0].data[0, 0] == 2.0
        stats = (await server.statistics("m"))["model_stats"][0]
        assert stats["version"] == "1"


async def test_an_instance_that_fails_unloads_the_others_of_its_version(tmp_path: Path) -> None:
    write_fake_model(tmp_path, "m", count=3)
    BEHAVIOUR.load_barrier = threading.Barrier(3, timeout=5)
    BEHAVIOUR.fail_instances = {"m_0_1"}
    options = ServerOptions(model_repository=[str(tmp_path)], exit_on_error=False)
    async with Server(options) as server:
        assert not server.lifecycle.is_ready("m")
        rows = [r for r in await server.repository_index() if r["name"] == "m"]
        assert rows == [{"name": "m", "version": "1", "state": "UNAVAILABLE",
                         "reason": "fake load failure of instance m_0_1"}]
        # the two that loaded beside it are finalized again, before the server stops
        assert BEHAVIOUR.initialized == {"m_0_0": 1, "m_0_2": 1} == BEHAVIOUR.finalized
