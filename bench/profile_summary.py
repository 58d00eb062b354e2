"""Summarise a py-spy `--format raw` (collapsed stacks) profile of the server: time per component and top functions.

    py-spy record --pid PID --duration 20 --format raw -o /tmp/prof.txt [--gil]
    python bench/profile_summary.py /tmp/prof.txt [--top 25]

A stack line is `frame;frame;... count`, outermost first (frames `func (file:line)`; asyncio tasks run from
uvloop's C code, so their stacks start at the coroutine). "own" = samples where the function is the innermost
frame, "total" = samples where it is anywhere on the stack; components are assigned by the innermost frame's file.
Without --gil py-spy samples every non-idle thread; with --gil only the thread holding the GIL.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter

# first match wins; matched against the frame's file path
COMPONENTS = [
    ("onnxruntime", r"onnxruntime/"),
    ("our codec (frontends/http/codec, tensors, datatypes)", r"workbench/(frontends/http/codec|tensors|datatypes)"),
    ("our HTTP frontend (infer_asgi fast path, app)", r"workbench/frontends/"),
    ("engine/scheduler/backend (workbench/engine, scheduling, backends, statistics)", r"workbench/"),
    ("FastAPI/starlette routing", r"(fastapi|starlette)/"),
    ("uvicorn/httptools", r"(uvicorn|httptools|h11)/"),
    ("thread hand-off (concurrent.futures, threading, queue)", r"(concurrent/futures|threading\.py|queue\.py)"),
    ("asyncio/uvloop event loop", r"(asyncio/|uvloop)"),
    ("orjson/numpy/pydantic", r"(orjson|numpy|pydantic)"),
]
FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^()]*?)(:\d+)?\)$")


def component(file: str) -> str:
    for name, pat in COMPONENTS:
        if re.search(pat, file):
            return name
    return "other (" + file.rsplit("/", 1)[-1] + ")"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("raw")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    own: Counter[str] = Counter()
    total: Counter[str] = Counter()
    comp_own: Counter[str] = Counter()
    threads: Counter[str] = Counter()
    n = 0
    with open(args.raw) as raw:
        lines = list(raw)
    for line in lines:
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if not stack:
            continue
        c = int(count)
        frames = stack.split(";")
        threads[re.sub(r":\d+", "", frames[0])] += c
        n += c
        parsed = []
        for f in frames:
            m = FRAME.match(f)
            parsed.append((m["func"], m["file"]) if m else (f, f))
        if not parsed:
            continue
        func, file = parsed[-1]
        own[f"{func} ({file.split('site-packages/')[-1]})"] += c
        comp_own[component(file)] += c
        for key in {f"{fn} ({fl.split('site-packages/')[-1]})" for fn, fl in parsed}:
            total[key] += c
    pct = lambda v: f"{100.0 * v / n:.1f}%"  # noqa: E731
    print(f"{n} samples\n\n| outermost Python frame (thread or asyncio task entry) | share |\n|---|---:|")
    for t, v in threads.most_common(8):
        print(f"| {t} | {pct(v)} |")
    print("\n| component (by innermost frame) | own share |\n|---|---:|")
    for k, v in comp_own.most_common():
        print(f"| {k} | {pct(v)} |")
    print("\n| top functions by own time | own |\n|---|---:|")
    for k, v in own.most_common(args.top):
        print(f"| `{k}` | {pct(v)} |")
    print("\n| top functions by total (inclusive) time | total |\n|---|---:|")
    for k, v in total.most_common(args.top):
        print(f"| `{k}` | {pct(v)} |")


if __name__ == "__main__":
    main()
