"""Priority levels cost memory by use, not by count (issue 19 item 3).

``priority_levels: 18446744073709551615`` (the largest uint64) used to make the server
allocate two deques and a policy per level until the kernel killed it. As in Triton's
``PriorityQueue``, only the levels with their own ``priority_queue_policy`` exist up front;
the others are made when a request arrives at them. Memory is measured with tracemalloc
(what Python allocates), not timed.
"""

from __future__ import annotations

import asyncio
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from workbench import InferenceRequest, Server, ServerOptions, Tensor, Unavailable
from workbench.backends.registry import register_backend
from workbench.testing.fake_backend import BEHAVIOUR, FakeBackend, write_fake_model
from workbench.testing.waits import queued

#: far below what one deque per level would take for 50 000 levels (over 50 MB)
MEMORY_BOUND = 16 * 2**20


def request(value: float, **parameters: object) -> InferenceRequest:
    return InferenceRequest("fake", [Tensor("INPUT0", "FP32", np.full((1, 1), value, np.float32))],
                            parameters=dict(parameters))


@pytest.mark.parametrize("levels", [50_000, 2**64 - 1])
async def test_many_priority_levels_load_in_bounded_memory_and_still_order(tmp_path: Path, levels: int) -> None:
    register_backend("fake", FakeBackend)
    write_fake_model(tmp_path, "fake", count=1, extra=f"""
dynamic_batching {{
  priority_levels: {levels}
  default_priority_level: {levels}
  priority_queue_policy {{ key: 1 value {{ max_queue_size: 1 }} }}
}}""")
    BEHAVIOUR.reset()
    tracemalloc.start()
    try:
        server = Server(ServerOptions(model_repository=[str(tmp_path)]))
        await server.start()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    try:
        assert peak < MEMORY_BOUND, f"loading took {peak / 2**20:.1f} MiB"
        BEHAVIOUR.gate.clear()
        blocker = asyncio.create_task(server.infer(request(-1)))
        await BEHAVIOUR.executing(1)
        tasks = [asyncio.create_task(server.infer(request(v))) for v in (1, 2)]  # the default level
        await queued(server, "fake", 2)
        tasks.append(asyncio.create_task(server.infer(request(50, priority=levels - 1))))
        await queued(server, "fake", 3)
        tasks.append(asyncio.create_task(server.infer(request(100, priority=1))))
        await queued(server, "fake", 4)
        with pytest.raises(Unavailable, match=r"^Exceeds maximum queue size$"):  # level 1's own policy
            await server.infer(request(101, priority=1))
        BEHAVIOUR.gate.set()
        await asyncio.gather(blocker, *tasks)
        assert BEHAVIOUR.batches == [[-1.0], [100.0, 50.0, 1.0, 2.0]]
    finally:
        BEHAVIOUR.gate.set()
        await server.stop()
