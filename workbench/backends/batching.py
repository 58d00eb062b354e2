"""Helpers that model backends share to run a batch of requests as one execution.

The dynamic batcher hands a backend 1..max_batch_size requests whose inputs have the batch
dimension first; the backend joins them along that dimension, runs once, and splits every
output back into per-request slices of the same sizes.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from workbench.backends.base import BackendRequest, BackendResponse


def requested_union(requests: Sequence[BackendRequest], all_outputs: Sequence[str]) -> list[str]:
    """Outputs any request of the batch asked for, in model order (all of them if none asked)."""
    wanted = set().union(*(r.requested_outputs for r in requests))
    return [name for name in all_outputs if name in wanted] or list(all_outputs)


def split_outputs(
    requests: Sequence[BackendRequest], outputs: dict[str, np.ndarray], sizes: Sequence[int]
) -> list[BackendResponse]:
    """One response per request: its ``sizes[i]`` rows of every output it asked for."""
    if len(requests) == 1:
        wanted = requests[0].requested_outputs or outputs.keys()
        return [BackendResponse({n: outputs[n] for n in wanted if n in outputs})]
    responses, start = [], 0
    for request, size in zip(requests, sizes, strict=True):
        wanted = request.requested_outputs or outputs.keys()
        part = {n: outputs[n][start : start + size] for n in wanted if n in outputs}
        responses.append(BackendResponse(part))
        start += size
    return responses
