"""The dynamic batcher decides batches as Triton's ``GetDynamicBatch`` does (issue 19 items
1 and 2): a batch equal to any preferred size leaves at once, a batch is cut before it would
grow past the largest preferred size, and once the queue delay has run out the whole pending
batch (up to ``max_batch_size``) leaves. Deterministic through Triton's test hook
``TRITONSERVER_DELAY_SCHEDULER`` (hold the first N requests until N are queued).

"Leaves at once" is shown with a 10 s queue delay and a wait far shorter than it; nothing
here asserts an upper bound on timing otherwise.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import numpy as np
import pytest

from workbench import InferenceRequest, Server, ServerOptions, Tensor, Unavailable
from workbench.backends.registry import register_backend
from workbench.testing.fake_backend import BEHAVIOUR, FAKE_CONFIG, FakeBackend, write_backend_model
from workbench.testing.waits import queued, until

LONG_DELAY = "max_queue_delay_microseconds: 10000000"  # 10 s: "at once" waits at most 3 s here
PREFERRED_2_6 = "preferred_batch_size: [ 2, 6 ]"


async def start(repo: Path, batching: str) -> Server:
    """The fake model (one instance, ``max_batch_size: 8``) with ``dynamic_batching { batching }``."""
    register_backend("fake", FakeBackend)
    config = FAKE_CONFIG.format(name="fake", count=1, group="").replace("max_batch_size: 4", "max_batch_size: 8")
    write_backend_model(repo, "fake", config + f"dynamic_batching {{ {batching} }}\n")
    BEHAVIOUR.reset()
    server = Server(ServerOptions(model_repository=[str(repo)]))
    await server.start()
    return server


def request(value: float, batch: int = 1) -> InferenceRequest:
    return InferenceRequest("fake", [Tensor("INPUT0", "FP32", np.full((batch, 1), value, np.float32))])


async def batch_sizes(server: Server) -> dict[int, int]:
    stats = (await server.statistics("fake"))["model_stats"][0]
    return {b["batch_size"]: b["compute_infer"]["count"] for b in stats["batch_stats"]}


# ---------------------------------------------------------------------- item 1
async def test_a_lone_request_of_a_smaller_preferred_size_leaves_at_once(tmp_path: Path, stopper) -> None:
    server = await start(tmp_path, f"{PREFERRED_2_6} {LONG_DELAY}")
    stopper(server)
    result = await asyncio.wait_for(server.infer(request(1, batch=2)), timeout=3)
    assert result.outputs[0].data.shape == (2, 1)
    assert await batch_sizes(server) == {2: 1}


async def test_two_requests_reaching_a_smaller_preferred_size_leave_at_once(tmp_path: Path, stopper) -> None:
    server = await start(tmp_path, f"{PREFERRED_2_6} {LONG_DELAY}")
    stopper(server)
    await asyncio.wait_for(asyncio.gather(server.infer(request(1)), server.infer(request(2))), timeout=3)
    assert BEHAVIOUR.batches == [[1.0, 2.0]]


# ---------------------------------------------------------------------- item 2
async def test_a_batch_is_cut_before_it_grows_past_the_largest_preferred_size(tmp_path: Path) -> None:
    server = await start(tmp_path, f"{PREFERRED_2_6} {LONG_DELAY}")
    try:
        three = asyncio.create_task(server.infer(request(3, batch=3)))
        await queued(server, "fake", 1)  # 3 is no preferred size: it waits for more
        four = asyncio.create_task(server.infer(request(4, batch=4)))
        await asyncio.wait_for(three, timeout=3)  # 3 + 4 would pass 6: the 3 leaves alone, at once
        assert BEHAVIOUR.batches == [[3.0]]
        await queued(server, "fake", 1)  # the 4 waits out its own delay (stop flushes it)
    finally:
        await server.stop()
    assert (await four).outputs[0].data.shape == (4, 1)
    assert BEHAVIOUR.batches == [[3.0], [4.0]]


async def test_cut_at_the_largest_preferred_size_the_queue_reaches(tmp_path: Path, stopper, monkeypatch) -> None:
    monkeypatch.setenv("TRITONSERVER_DELAY_SCHEDULER", "8")  # all eight are queued before any batch forms
    server = await start(tmp_path, f"{PREFERRED_2_6} {LONG_DELAY}")
    stopper(server)
    values = [float(v) for v in range(1, 9)]
    await asyncio.wait_for(asyncio.gather(*(server.infer(request(v)) for v in values)), timeout=3)
    assert BEHAVIOUR.batches == [values[:6], values[6:]]  # 6 (not 8, nor 2), then 2: both preferred


async def test_past_the_delay_the_whole_pending_batch_leaves(tmp_path: Path, stopper, monkeypatch) -> None:
    # Triton's L0_batcher test_multi_batch_delayed_use_max_batch, in small: 3 and 4 wait past
    # the delay (held by the hook); with the third request the whole 8 leaves, not 3 + 5
    monkeypatch.setenv("TRITONSERVER_DELAY_SCHEDULER", "3")
    server = await start(tmp_path, f"{PREFERRED_2_6} max_queue_delay_microseconds: 50000")
    stopper(server)
    held = [asyncio.create_task(server.infer(request(v, batch=b))) for v, b in ((3, 3), (4, 4))]
    await queued(server, "fake", 2)
    expired_at = time.monotonic() + 0.05
    await until(lambda: time.monotonic() > expired_at, "the queue delay of the held requests to pass")
    await asyncio.gather(*held, server.infer(request(1)))
    assert BEHAVIOUR.batches == [[3.0, 4.0, 1.0]]
    assert await batch_sizes(server) == {8: 1}


async def test_past_the_delay_a_batch_is_not_cut_to_a_preferred_size(tmp_path: Path, stopper, monkeypatch) -> None:
    monkeypatch.setenv("TRITONSERVER_DELAY_SCHEDULER", "3")
    server = await start(tmp_path, f"{PREFERRED_2_6} max_queue_delay_microseconds: 50000")
    stopper(server)
    held = [asyncio.create_task(server.infer(request(v))) for v in (1, 2)]
    await queued(server, "fake", 2)
    expired_at = time.monotonic() + 0.05
    await until(lambda: time.monotonic() > expired_at, "the queue delay of the held requests to pass")
    await asyncio.gather(*held, server.infer(request(3)))
    assert BEHAVIOUR.batches == [[1.0, 2.0, 3.0]]  # 3 past the delay, not 2 (preferred) then 1


# ---------------------------------------------------------------------- item 18 (dynamic batcher)
async def test_delay_scheduler_hook_holds_the_first_requests(tmp_path: Path, stopper, monkeypatch) -> None:
    monkeypatch.setenv("TRITONSERVER_DELAY_SCHEDULER", "3")
    server = await start(tmp_path, "")  # no delay: without the hook each request runs at once
    stopper(server)
    held = [asyncio.create_task(server.infer(request(v))) for v in (0, 1)]
    await queued(server, "fake", 2)  # the instance is idle, yet both wait
    assert BEHAVIOUR.batches == []
    await asyncio.gather(*held, server.infer(request(2)))
    assert BEHAVIOUR.batches == [[0.0, 1.0, 2.0]]
    await server.infer(request(3))  # the hold is over for good
    assert BEHAVIOUR.batches[-1] == [3.0]


@pytest.mark.parametrize("value", ["0", "", "x", "-2"])
async def test_delay_scheduler_hook_off(tmp_path: Path, stopper, monkeypatch, value: str) -> None:
    monkeypatch.setenv("TRITONSERVER_DELAY_SCHEDULER", value)
    server = await start(tmp_path, "")
    stopper(server)
    await asyncio.wait_for(server.infer(request(1)), timeout=3)


async def test_no_queue_timeout_expires_while_the_delay_scheduler_hook_holds(tmp_path: Path, stopper,
                                                                             monkeypatch) -> None:
    # Triton's batcher thread applies no queue policy while it holds (dynamic_batch_scheduler.cc):
    # a request past its timeout stays queued until the hold ends, then the policy applies
    monkeypatch.setenv("TRITONSERVER_DELAY_SCHEDULER", "2")
    server = await start(tmp_path, "default_queue_policy { timeout_action: REJECT "
                                   "default_timeout_microseconds: 50000 }")
    stopper(server)
    timed = asyncio.create_task(server.infer(request(1)))
    await queued(server, "fake", 1)
    expired_at = time.monotonic() + 0.1
    await until(lambda: time.monotonic() > expired_at, "the held request's queue timeout to pass")
    assert not timed.done()  # still queued, though its 50 ms ran out
    await queued(server, "fake", 1)
    second = await server.infer(request(2))  # the hold ends: the timed-out request is rejected
    assert second.outputs[0].data.tolist() == [[2.0]]
    with pytest.raises(Unavailable, match=r"^Request timeout expired$"):
        await timed
    assert BEHAVIOUR.batches == [[2.0]]
