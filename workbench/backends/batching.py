"""Helpers that model backends share to run a batch of requests as one execution.

The dynamic batcher hands a backend 1..max_batch_size requests whose inputs have the batch
dimension first; the backend joins them along that dimension (:func:`gather_inputs`), runs
once, and splits every output back into per-request slices of the same sizes
(:func:`split_outputs`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from workbench.backends.base import BackendRequest, BackendResponse
from workbench.errors import InvalidArgument, Unsupported


def requested_union(requests: Sequence[BackendRequest], all_outputs: Sequence[str]) -> list[str]:
    """Outputs any request of the batch asked for, in model order (all of them if none asked)."""
    wanted = set().union(*(r.requested_outputs for r in requests))
    return [name for name in all_outputs if name in wanted] or list(all_outputs)


def gather_inputs(
    requests: Sequence[BackendRequest], names: Iterable[str] | None = None, *, model: str = ""
) -> tuple[dict[str, np.ndarray], list[int]]:
    """The batch's inputs as one array per input, and each request's batch size.

    Each input's arrays are joined along the first (batch) dimension in request order
    (``np.concatenate``: shape ``[sum(sizes), ...]``, the requests' dtype); with one request
    its arrays are returned as they are (no copy). Backends convert the joined arrays to
    their framework's types themselves. Triton's backends gather the same way
    (``BackendInputCollector``).

    Args:
        requests: the execution's 1..max_batch_size requests.
        names: the inputs to gather, in this order (e.g. a graph's inputs); default: every
            input of the requests, in the first request's order. An input that no request
            carries (an optional one) is left out of the result.
        model: the model's name, for the error text.

    Returns:
        ``(feed, sizes)``: input name -> joined array, and ``requests[i].batch_size`` per
        request (what :func:`split_outputs` takes).

    Raises:
        InvalidArgument: an input that some requests of the batch carry and others do not.
    """
    sizes = [r.batch_size for r in requests]
    if names is None:
        names = dict.fromkeys(name for r in requests for name in r.inputs)
    feed: dict[str, np.ndarray] = {}
    for name in names:
        arrays = [r.inputs[name] for r in requests if name in r.inputs]
        if not arrays:
            continue
        if len(arrays) != len(requests):
            raise InvalidArgument(
                f"optional input '{name}' of model '{model}' is in some requests of a batch "
                "but not in others"
            )
        feed[name] = arrays[0] if len(arrays) == 1 else np.concatenate(arrays)
    return feed, sizes


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
