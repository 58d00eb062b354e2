"""What an attached dashboard costs the server it watches: HTTP requests per beat, by route.

Starts ``workbench serve`` with the attach tests' python add_sub (``workbench.testing.attach``),
attaches a :class:`workbench.ui.app.Dashboard` to it (key and ``/metrics`` given), and counts
the requests its beats make (an httpx event hook on the client), each beat after the last
one's reads ended.

    PYTHONPATH=. python bench/attach_reads.py [--beats 20] [--replicas 1]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import re
import tempfile
from pathlib import Path

from workbench.remote import RemoteServer
from workbench.testing.attach import ADMIN_HEADER, server_flags, write_python_add_sub
from workbench.testing.process import ServerProcess


async def measure(url: str, metrics_url: str, beats: int, replicas: int) -> collections.Counter:
    from workbench.ui.app import Dashboard

    urls = [url] + [url.replace("localhost", "127.0.0.1")] * (replicas > 1)
    remote = RemoteServer(urls, headers=ADMIN_HEADER, metrics_urls=[metrics_url])
    seen: collections.Counter = collections.Counter()

    async def count(request) -> None:
        seen[f"{request.method} {re.sub(r':[0-9]+', ':PORT', str(request.url))}"] += 1

    remote._client.event_hooks["request"].append(count)
    board = Dashboard(remote, history=30)
    await board.models.refresh()
    await board.store.settle()
    seen.clear()
    for _ in range(beats):
        board.tick()
        await board.store.settle()
    board.close()
    await board.store.settle()
    return seen


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--beats", type=int, default=20)
    parser.add_argument("--replicas", type=int, default=1, choices=(1, 2))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        process = ServerProcess(server_flags(write_python_add_sub(Path(work) / "models")))
        try:
            seen = asyncio.run(measure(f"http://localhost:{process.port}", process.metrics_url, args.beats,
                                       args.replicas))
        finally:
            process.stop()
    for route, n in sorted(seen.items()):
        print(f"{n / args.beats:6.2f}/beat  {route}")
    print(f"{sum(seen.values()) / args.beats:6.2f}/beat  in all ({args.beats} beats, {args.replicas} replica(s))")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
