"""What TensorFlow costs the server process: import time, and RSS added by the import and by one
digits_savedmodel instance (the loader's own memory reading, Triton's memory_usage statistics).

    PYTHONPATH=. .venv/bin/python bench/tensorflow_import_cost.py [REPO]
"""

from __future__ import annotations

import asyncio
import sys
import time

import psutil  # type: ignore[import-untyped]

from workbench import Server, ServerOptions


def rss_mib() -> float:
    return psutil.Process().memory_info().rss / 2**20


async def main(repo: str) -> None:
    base = rss_mib()
    start = time.perf_counter()
    from workbench.config.tensorflow_signature import import_tensorflow

    import_tensorflow()
    took = time.perf_counter() - start
    imported = rss_mib()
    options = ServerOptions(model_repository=[repo], model_control_mode="explicit",
                            load_model=["digits_savedmodel"])
    async with Server(options) as server:
        loaded = rss_mib()
        stats = (await server.statistics("digits_savedmodel"))["model_stats"][0]
    print(f"import tensorflow (+ libtriton first): {took:.2f} s, RSS +{imported - base:.0f} MiB")
    print(f"server + one digits_savedmodel instance: RSS +{loaded - imported:.0f} MiB "
          f"(loader's reading: {stats.get('memory_usage')})")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "sample_models/repository"))
