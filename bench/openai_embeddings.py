"""Embeddings throughput: ``POST /v1/embeddings`` vs ``POST /v2/models/text_embedder/infer``.

One ``workbench serve`` (the sample repository, explicit mode, ``text_embedder`` loaded);
the same texts sent both ways by the same client (httpx, asyncio, ``CONCURRENCY`` requests
in flight, keep-alive), in the same run, alternating route by route for ``ROUNDS`` rounds of
``SECONDS`` each, for batches of 1 and 8 texts per request. Reported: texts/s, the median of
the rounds, and the v1/v2 ratio. The v2 body is JSON (``BYTES`` data as strings, the JSON
answer as numbers), as the v1 body is, so the difference is the OpenAI route's own work:
parsing, the model-kind lookup, the token count (``usage``), encoding the answer. The
``openai`` row is the unmodified ``openai`` client (sync, one thread per request in flight),
to show what the client itself costs. Server and client share the machine's cores.

Usage:
    PYTHONPATH=<checkout> python bench/openai_embeddings.py [ROUNDS] [SECONDS]
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import openai

from workbench.testing.process import ServerProcess

REPOSITORY = Path(__file__).resolve().parents[1] / "sample_models" / "repository"
CONCURRENCY = 4
SENTENCES = ["The quick brown fox jumps over the lazy dog.", "A model server answers requests in batches.",
             "Embeddings map sentences to vectors.", "Triton serves models over HTTP and gRPC.",
             "The tokenizer splits words into pieces.", "Throughput is measured in texts per second.",
             "Two cores are shared by the server and the client.", "Medians of rounds resist noise."]


def bodies(batch: int) -> dict[str, tuple[str, dict]]:
    texts = SENTENCES[:batch]
    return {
        "v1_float": ("/v1/embeddings", {"model": "text_embedder", "input": texts}),
        "v1_base64": ("/v1/embeddings", {"model": "text_embedder", "input": texts, "encoding_format": "base64"}),
        "v2_json": ("/v2/models/text_embedder/infer", {"inputs": [
            {"name": "TEXT", "shape": [batch, 1], "datatype": "BYTES", "data": texts}]}),
    }


async def run_httpx(url: str, path: str, body: dict, seconds: float) -> int:
    """Requests answered 200 in ``seconds`` with ``CONCURRENCY`` in flight."""
    done = 0
    end = time.monotonic() + seconds
    async with httpx.AsyncClient(base_url=f"http://{url}", timeout=60) as client:
        async def worker() -> None:
            nonlocal done
            while time.monotonic() < end:
                answer = await client.post(path, json=body)
                answer.raise_for_status()
                done += 1
        await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    return done


def run_openai(url: str, texts: list[str], seconds: float) -> int:
    end = time.monotonic() + seconds
    oa = openai.OpenAI(base_url=f"http://{url}/v1", api_key="unused", max_retries=0)

    def worker() -> int:
        n = 0
        while time.monotonic() < end:
            oa.embeddings.create(model="text_embedder", input=texts, encoding_format="float")
            n += 1
        return n

    with ThreadPoolExecutor(CONCURRENCY) as pool:
        return sum(pool.map(lambda _: worker(), range(CONCURRENCY)))


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 4.0
    server = ServerProcess([f"--model-repository={REPOSITORY}", "--model-control-mode=explicit",
                            "--load-model=text_embedder", "--log-verbose=0"])
    try:
        print(f"# {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC, c={CONCURRENCY}, "
              f"{rounds} rounds x {seconds:.0f} s per route, alternating")
        for batch in (1, 8):
            routes = bodies(batch)
            for path, body in routes.values():  # warm-up: every route once
                asyncio.run(run_httpx(server.url, path, body, 1.0))
            rates: dict[str, list[float]] = {name: [] for name in [*routes, "openai_client"]}
            for _ in range(rounds):
                for name, (path, body) in routes.items():
                    rates[name].append(asyncio.run(run_httpx(server.url, path, body, seconds)) * batch / seconds)
                rates["openai_client"].append(run_openai(server.url, SENTENCES[:batch], seconds) * batch / seconds)
            medians = {name: statistics.median(values) for name, values in rates.items()}
            for name, values in rates.items():
                ratio = medians[name] / medians["v2_json"]
                print(f"batch {batch}  {name:14s} {medians[name]:8.1f} texts/s  (x{ratio:.2f} of v2_json)  "
                      f"rounds: {' '.join(f'{v:.0f}' for v in values)}")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
