"""Throughput and latency of digits_mlp with and without hot reloads, over HTTP.

    .venv/bin/python bench/reload_under_load.py [--seconds 15] [--rounds 2] [--concurrency 16]
        [--reload-every 2] [--trigger api|poll] [--batch 1] [--verbose]

Copies ``digits_mlp`` from the sample repository into a temporary repository (the sample
repository is only read), starts ``workbench serve`` on it, and drives it with
``--concurrency`` asyncio clients (``tritonclient.http.aio``, binary tensors, batch
``--batch``) in two kinds of phase of ``--seconds`` each, alternated ``--rounds`` times
(this shared VM's speed drifts), after a short warm-up:

* ``steady``: no reload;
* ``reloads``: every ``--reload-every`` seconds digits_mlp changes and reloads, alternating
  a config change (max_batch_size 64 <-> 32) and a model file change (version 2's ``model.onnx``
  rewritten with a new doc string, same weights). ``--trigger api``: explicit mode, the
  change is applied by ``POST /v2/repository/models/digits_mlp/load``; ``--trigger poll``:
  poll mode (``--repository-poll-secs 0.5``), the server finds the change itself.

Every response is compared with the logits of the same input before the run (a changed
model file keeps the weights), so a wrong answer counts as a failure. Prints one markdown
table: requests, failures, throughput (inferences/s), p50 / p99 latency (ms), reloads.
The client runs on the same machine as the server: compare the two rows, not absolute
numbers with perf_analyzer's.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import tritonclient.http.aio as aioclient

from workbench.testing.process import ServerProcess
from workbench.testing.reload import Tally, atomic_write, run_clients

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_models" / "repository" / "digits_mlp"
MODEL = "digits_mlp"


def copy_model(repo: Path) -> Path:
    """digits_mlp's config and version folders, copied (the sample repository is shared)."""
    folder = repo / MODEL
    folder.mkdir(parents=True)
    shutil.copy2(SAMPLE / "config.pbtxt", folder / "config.pbtxt")
    for version in (p for p in SAMPLE.iterdir() if p.is_dir() and p.name.isdigit()):
        shutil.copytree(version, folder / version.name)
    return folder


def change(folder: Path, step: int) -> str:
    """Reload ``step``'s change: odd steps toggle max_batch_size 64 <-> 32 in config.pbtxt
    (no effect on batch-1 clients: what is measured is the reload, not another config),
    even steps rewrite version 2's model file (new doc string, same weights)."""
    if step % 2:
        config = (folder / "config.pbtxt").read_text()
        old, new = ("max_batch_size: 64", "max_batch_size: 32")
        if old not in config:
            old, new = new, old
        atomic_write(folder / "config.pbtxt", config.replace(old, new, 1))
        return f"config {new}"
    model = onnx.load(str(folder / "2" / "model.onnx"))
    model.doc_string = f"reload {step}"
    atomic_write(folder / "2" / "model.onnx", model.SerializeToString())
    return "model file"


def inputs(batch: int, count: int = 32) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.integers(0, 17, (batch, 64)).astype(np.float32) for _ in range(count)]


async def infer(client: aioclient.InferenceServerClient, pixels: np.ndarray) -> np.ndarray:
    tensor = aioclient.InferInput("pixels", list(pixels.shape), "FP32")
    tensor.set_data_from_numpy(pixels, binary_data=True)
    output = aioclient.InferRequestedOutput("logits", binary_data=True)
    result = await client.infer(MODEL, [tensor], outputs=[output])
    return result.as_numpy("logits")


async def phase(client, data, expected, concurrency: int, seconds: float, reloader=None) -> Tally:
    async def send(i: int) -> None:
        k = i % len(data)
        logits = await infer(client, data[k])
        if not np.allclose(logits, expected[k], rtol=1e-5, atol=1e-5):
            raise AssertionError(f"wrong logits for input {k}")

    stop = asyncio.Event()
    tally = Tally()
    clients = asyncio.ensure_future(run_clients(send, concurrency, stop, tally))
    start = time.perf_counter()
    reloads = asyncio.ensure_future(reloader(stop)) if reloader else None
    await asyncio.sleep(seconds)
    stop.set()
    await clients
    tally.elapsed_s = time.perf_counter() - start  # type: ignore[attr-defined]
    tally.reloads = await reloads if reloads else 0  # type: ignore[attr-defined]
    return tally


def merge(tallies: list[Tally]) -> Tally:
    merged = Tally()
    merged.elapsed_s = sum(t.elapsed_s for t in tallies)  # type: ignore[attr-defined]
    merged.reloads = sum(t.reloads for t in tallies)  # type: ignore[attr-defined]
    for tally in tallies:
        merged.ok += tally.ok
        merged.failed += tally.failed
        merged.errors += tally.errors
        merged.latencies_s += tally.latencies_s
    return merged


def row(name: str, tally: Tally, batch: int) -> str:
    lat = sorted(tally.latencies_s)
    p50 = statistics.median(lat) * 1e3 if lat else float("nan")
    p99 = lat[min(len(lat) - 1, int(0.99 * len(lat)))] * 1e3 if lat else float("nan")
    rate = tally.ok * batch / tally.elapsed_s  # type: ignore[attr-defined]
    return (f"| {name} | {tally.ok + tally.failed} | {tally.failed} | {rate:.0f} | {p50:.2f} | "
            f"{p99:.2f} | {tally.reloads} |")  # type: ignore[attr-defined]


async def main_async(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="reload_bench_") as tmp:
        folder = copy_model(Path(tmp))
        flags = [f"--model-repository={tmp}", "--allow-grpc=false", "--allow-metrics=false"]
        if args.trigger == "api":
            flags += ["--model-control-mode=explicit", f"--load-model={MODEL}"]
        else:
            flags += ["--model-control-mode=poll", "--repository-poll-secs=0.5"]
        server = ServerProcess(flags)
        client = aioclient.InferenceServerClient(f"127.0.0.1:{server.port}", conn_limit=args.concurrency)
        # its own connection: the load call must not queue behind the clients' pool
        control = aioclient.InferenceServerClient(f"127.0.0.1:{server.port}")
        try:
            data = inputs(args.batch)
            expected = [await infer(client, x) for x in data]
            await phase(client, data, expected, args.concurrency, min(3.0, args.seconds))  # warm-up

            reload_s: list[float] = []

            async def reloader(stop: asyncio.Event) -> int:
                step = 0
                while True:
                    try:
                        await asyncio.wait_for(stop.wait(), args.reload_every)
                        return step
                    except TimeoutError:
                        pass
                    step += 1
                    began = time.perf_counter()
                    what = change(folder, step)
                    if args.trigger == "api":
                        await control.load_model(MODEL)
                    reload_s.append(time.perf_counter() - began)
                    if args.verbose:
                        print(f"reload {step}: {what} ({reload_s[-1] * 1e3:.0f} ms)")

            steady_rounds, reloading_rounds = [], []
            for _ in range(args.rounds):  # alternated: the machine's speed drifts
                steady_rounds.append(await phase(client, data, expected, args.concurrency, args.seconds))
                reloading_rounds.append(
                    await phase(client, data, expected, args.concurrency, args.seconds, reloader))
            steady, reloading = merge(steady_rounds), merge(reloading_rounds)
        finally:
            await client.close()
            await control.close()
            status = server.stop()
        mode = f"{args.trigger}, every {args.reload_every:g} s"
        print(f"digits_mlp over HTTP, {args.concurrency} clients, batch {args.batch}, "
              f"{args.rounds} x {args.seconds:g} s per phase, reloads: {mode}\n")
        print("| phase | requests | failed | infer/s | p50 ms | p99 ms | reloads |")
        print("|---|---|---|---|---|---|---|")
        print(row("steady", steady, args.batch))
        print(row("reloads", reloading, args.batch))
        for name, tally in (("steady", steady), ("reloads", reloading)):
            for error in tally.errors:
                print(f"{name} error: {error}")
        return 1 if steady.failed or reloading.failed or status else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=15.0, help="length of each phase")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--reload-every", type=float, default=2.0, help="seconds between reloads")
    parser.add_argument("--trigger", choices=["api", "poll"], default="api")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=2, help="steady/reloads phase pairs")
    parser.add_argument("--verbose", action="store_true", help="print each reload")
    return asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    raise SystemExit(main())
