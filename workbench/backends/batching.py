"""Helpers that model backends share to run a batch of requests as one execution.

The dynamic batcher hands a backend 1..max_batch_size requests whose inputs have the batch
dimension first; the backend joins them along that dimension, runs once, and splits every
output back into per-request slices of the same sizes.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from workbench.backends.base import BackendRequest, BackendResponse
from workbench.errors import Unsupported


def requested_union(requests: Sequence[BackendRequest], all_outputs: Sequence[str]) -> list[str]:
    """Outputs any request of the batch asked for, in model order (all of them if none asked)."""
    wanted = set().union(*(r.requested_outputs for r in requests))
    return [name for name in all_outputs if name in wanted] or list(all_outputs)


def split_outputs(
    requests: Sequence[BackendRequest], outputs: dict[str, np.ndarray], sizes: Sequence[int]
) -> list[BackendResponse]:
    """One response per request: its ``sizes[i]`` rows of every output it asked for.

    For a batching model (``requests[0].batched``) every output must hold at least
    ``sum(sizes)`` rows; when one holds fewer (a model that reduces over the batch axis),
    it cannot be split, and every request that asked for it fails with
    :class:`~workbench.errors.Unsupported` (Triton's ``BackendOutputResponder`` text,
    "[request id: <id>] failed to split the output tensor '<name>' in responses: expected
    batch size of atleast <N> in model output, got <M>", N the batch of the execution,
    Triton's spelling) rather than
    receive rows computed from other requests' data. Triton fails only the requests past
    the rows there are; the earlier ones would get rows mixed from the whole batch, so
    here they fail too. Outputs of a non-batching model are returned whole.
    """
    unsplittable = _unsplittable(requests, outputs, sizes)
    if len(requests) == 1 and not unsplittable:
        wanted = requests[0].requested_outputs or outputs.keys()
        return [BackendResponse({n: outputs[n] for n in wanted if n in outputs})]
    responses, start = [], 0
    for request, size in zip(requests, sizes, strict=True):
        wanted = request.requested_outputs or outputs.keys()
        broken = [unsplittable[n] for n in wanted if n in unsplittable]
        if broken:
            prefix = f"[request id: {request.request_id or '<id_unknown>'}] "
            responses.append(BackendResponse(error=Unsupported(prefix + broken[0])))
        else:
            part = {n: outputs[n][start : start + size] for n in wanted if n in outputs}
            responses.append(BackendResponse(part))
        start += size
    return responses


def _unsplittable(
    requests: Sequence[BackendRequest], outputs: dict[str, np.ndarray], sizes: Sequence[int]
) -> dict[str, str]:
    """The outputs with fewer rows than the batch, each with the error text for its
    requests (without the request id prefix)."""
    if not requests or not requests[0].batched:
        return {}
    total = sum(sizes)
    return {
        name: f"failed to split the output tensor '{name}' in responses: expected batch size "
        f"of atleast {total} in model output, got {array.shape[0]}"
        for name, array in outputs.items()
        if array.ndim and array.shape[0] < total
    }
