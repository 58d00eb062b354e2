"""Load through the switch to headless and back (issue 32 part 3): requests, failed, refused
and the largest latency, for bench/RESULTS.md.

    PYTHONPATH=. python bench/switch_load.py [--without steering|age] [--seconds 3]

``--without steering``: no BPF steering (the kernel's hash spreads new connections over both
listeners and the closing one resets what it queued); ``--without age``: no gRPC connection age
(a stopping gRPC server cancels the calls a busy channel sends meanwhile).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import tempfile
from pathlib import Path

from workbench import ServerOptions
from workbench.jupyter.host import EngineHost
from workbench.serving import switch as switch_module
from workbench.testing.reload import write_add_sub
from workbench.testing.switch_load import SwitchLoad


async def run(without: str, seconds: float) -> None:
    with tempfile.TemporaryDirectory() as repo:
        write_add_sub(Path(repo))
        options = ServerOptions(model_repository=[repo], http_address="127.0.0.1", grpc_address="127.0.0.1",
                                metrics_address="127.0.0.1", http_port=0, grpc_port=0, metrics_port=0,
                                exit_timeout_secs=10, grpc_max_connection_age_ms=2000)
        host = EngineHost(options, open_ports=True)
        await host.start()
        assert host.switch is not None
        if without == "steering":
            switch_module.steer = lambda sock, index: None
        if without == "age":
            host.switch.options = host.switch.options.model_copy(update={"grpc_max_connection_age_ms": 0})
        ports = host.status()["ports"]
        load = SwitchLoad(ports["http"], ports["grpc"]).start()
        await asyncio.sleep(seconds)
        await host.switch.to_headless()
        await asyncio.sleep(seconds)
        await host.switch.back()
        await asyncio.sleep(seconds)
        total = await asyncio.to_thread(load.stop)
        await host.stop()
    print(f"without={without or '-'} requests={total.requests} failed={total.failed} refused={total.refused} "
          f"max_latency_ms={total.max_latency_s * 1000:.0f}")
    for name, counts in load.counts.items():
        print(f"  {name}: {counts.requests} requests, {counts.failed} failed, {counts.refused} refused, "
              f"max {counts.max_latency_s * 1000:.0f} ms")
    for error in total.errors[:6]:
        print("  ", error[:160])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--without", choices=["steering", "age"], default="")
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    asyncio.run(run(args.without, args.seconds))


if __name__ == "__main__":
    main()
