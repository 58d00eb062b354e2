"""What mirroring costs the primary path (issue 32): ``--model``'s v1 serves, v2 is the
candidate; rounds of closed-loop load on the in-process engine (``server.infer``, no HTTP)
alternate mirror 0 % and ``--percent`` (100 %); per round the primary's throughput, p99 latency and the
process CPU time per primary inference (``/proc/self/stat`` utime + stime), then the medians.
``--served-candidate`` adds rounds with v2 serving (a split of ``{2: 1}``, no mirror): the
latency of the candidate as the served version.

    PYTHONPATH=. python bench/rollout_mirror.py [--model digits_mlp] [--rounds 6] [--seconds 3] \
        [--concurrency 8] [--cap 4] [--percent 100] [--served-candidate] [--repository DIR]

Inputs: for ``digits_mlp`` (v1 hidden 32, v2 hidden 64) the digits test split
(``sample_models/build_digits.py``); for ``minilm_encoder`` (v1 float32, v2 INT8 weights,
``sample_models/build_minilm_versions.py``) the sentences of ``workbench.testing.sentences``, one
per request. The mirror's agreement (argmax of the logits; cosine and max-abs difference of the
embeddings) is printed too. The model is copied to a temporary repository with both versions
served. Needs the sample models (``make setup``).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "sample_models"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
#: CPU time of processes and threads from /proc, loaded from this folder
proc_cpu: Any = importlib.import_module("proc_cpu")

from workbench import InferenceRequest, Server, ServerOptions, Tensor  # noqa: E402

#: a model's version policy in the bench's copy: both versions served
BOTH = "version_policy: { specific { versions: [ 1, 2 ] } }\n"


def digits_requests(repository: Path) -> list[InferenceRequest]:
    from build_digits import load_split

    return [InferenceRequest("digits_mlp", [Tensor("pixels", "FP32", row[None, :])]) for row in load_split().x_test]


def sentence_requests(repository: Path) -> list[InferenceRequest]:
    from tokenizers import Tokenizer

    from workbench.testing.sentences import SENTENCES

    tokenizer = Tokenizer.from_file(str(repository / "minilm_encoder" / "tokenizer.json"))
    tokenizer.enable_truncation(max_length=256)  # sentence-transformers' max_seq_length
    tokenizer.no_padding()  # tokenizer.json pads to 128: one sentence a request, unpadded
    requests = []
    for sentence in SENTENCES:
        tokens = tokenizer.encode(sentence)
        requests.append(InferenceRequest("minilm_encoder", [
            Tensor(name, "INT64", np.array([values], np.int64)) for name, values in (
                ("input_ids", tokens.ids), ("attention_mask", tokens.attention_mask),
                ("token_type_ids", tokens.type_ids))]))
    return requests


REQUESTS = {"digits_mlp": digits_requests, "minilm_encoder": sentence_requests}


async def one_round(server: Server, requests: list[InferenceRequest], seconds: float,
                    concurrency: int) -> dict[str, float]:
    latencies: list[float] = []
    stop = time.monotonic() + seconds

    async def loop(offset: int) -> None:
        i = offset
        while time.monotonic() < stop:
            template = requests[i % len(requests)]
            start = time.perf_counter()
            await server.infer(InferenceRequest(template.model_name, template.inputs))
            latencies.append(time.perf_counter() - start)
            i += concurrency

    cpu, wall = proc_cpu.process_cpu_s(), time.monotonic()
    await asyncio.gather(*(loop(k) for k in range(concurrency)))
    await server.rollouts.settle(requests[0].model_name)
    cpu, wall = proc_cpu.process_cpu_s() - cpu, time.monotonic() - wall
    return {"infer_s": len(latencies) / wall, "p99_us": float(np.percentile(latencies, 99)) * 1e6,
            "cpu_us_per_infer": cpu / len(latencies) * 1e6}


async def main(args: argparse.Namespace) -> None:
    model = args.model
    repo = Path(tempfile.mkdtemp(prefix="rollout_mirror_"))
    shutil.copytree(args.repository / model, repo / model)
    config = repo / model / "config.pbtxt"
    lines = [line for line in config.read_text().splitlines(keepends=True) if not line.startswith("version_policy")]
    config.write_text("".join(lines) + BOTH)
    requests = REQUESTS[model](args.repository)
    settings: list[str] = ["0 %", f"{args.percent:g} %"] + (["v2 served"] if args.served_candidate else [])
    results: dict[str, list[dict[str, float]]] = {name: [] for name in settings}
    async with Server(ServerOptions(model_repository=[str(repo)])) as server:
        await server.rollouts.set(model, {1: 1})
        await one_round(server, requests, 1.0, args.concurrency)  # warm-up
        for _ in range(args.rounds):
            for setting in settings:
                if setting == "0 %":
                    await server.rollouts.set(model, {1: 1})
                elif setting == "v2 served":
                    await server.rollouts.set(model, {2: 1})
                else:
                    await server.rollouts.set(model, {1: 1}, candidate=2, mirror_percent=args.percent,
                                              mirror_max_in_flight=args.cap)
                results[setting].append(await one_round(server, requests, args.seconds, args.concurrency))
        await server.rollouts.set(model, {1: 1}, candidate=2, mirror_percent=args.percent,
                                  mirror_max_in_flight=args.cap)
        await one_round(server, requests, args.seconds, args.concurrency)
        report = (await server.rollouts.get(model))["mirror"]
    shutil.rmtree(repo)
    print(f"{model}, c={args.concurrency}, {args.rounds} rounds x {args.seconds} s per setting, cap {args.cap}")
    print("| setting | infer/s (median) | p99 µs (median) | CPU µs / primary infer (median) | rounds infer/s |")
    print("|---|---|---|---|---|")
    for setting, rounds in results.items():
        med = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
        each = ", ".join(f"{r['infer_s']:.0f}" for r in rounds)
        print(f"| {setting} | {med['infer_s']:.0f} | {med['p99_us']:.0f} | {med['cpu_us_per_infer']:.1f} "
              f"| {each} |")
    print(f"last mirror round: mirrored {report['mirrored']}, shed {report['shed']}, "
          f"errors {report['candidate_errors']}, latency µs {report['latency_us']}, "
          f"agreement {report['agreement']}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=sorted(REQUESTS), default="digits_mlp")
    parser.add_argument("--repository", type=Path, default=ROOT / "sample_models" / "repository",
                        help="the built sample models (default: %(default)s)")
    parser.add_argument("--served-candidate", action="store_true", help="add rounds with v2 serving")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--cap", type=int, default=4)
    parser.add_argument("--percent", type=float, default=100.0)
    asyncio.run(main(parser.parse_args()))
