"""Helpers that model backends share to run a batch of requests as one execution.

The dynamic batcher hands a backend 1..max_batch_size requests whose inputs have the batch
dimension first; the backend joins them along that dimension (:func:`gather_inputs`), runs
once, and splits every output back into per-request slices of the same sizes
(:func:`split_outputs`). Given the model's
:class:`~workbench.config.batch_io.BatchLayout`, both also do Triton's ragged batching: ragged
inputs flat, batch inputs added, scatter outputs split by their source input's shapes
(:mod:`workbench.backends.ragged`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from workbench.backends.base import BackendRequest, BackendResponse
from workbench.backends.ragged import batch_input_array, flat_ragged, scatter
from workbench.common.errors import InvalidArgument, Unsupported, request_prefix
from workbench.config.batch_io import BatchLayout

_NO_LAYOUT = BatchLayout()


def requested_union(requests: Sequence[BackendRequest], all_outputs: Sequence[str]) -> list[str]:
    """Outputs any request of the batch asked for, in model order (all of them if none asked)."""
    wanted = set().union(*(r.requested_outputs for r in requests))
    return [name for name in all_outputs if name in wanted] or list(all_outputs)


def gather_inputs(
    requests: Sequence[BackendRequest], names: Iterable[str] | None = None, *, model: str = "",
    layout: BatchLayout | None = None,
) -> tuple[dict[str, np.ndarray], list[int]]:
    """The batch's inputs as one array per input, and each request's batch size.

    Each input's arrays are joined along the batch dimension in request order
    (``np.concatenate``: shape ``[sum(sizes), ...]``, the requests' dtype; one request's arrays
    are returned as they are), as Triton's ``BackendInputCollector``. With a ``layout`` (ragged
    batching) a ragged input is given flat (``[total elements]``, also for one request) and every
    ``batch_input`` target is added (:func:`~workbench.backends.ragged.batch_input_array`).

    Args:
        requests: the execution's 1..max_batch_size requests.
        names: the inputs to gather, in this order; default: every input of the requests, in the
            first request's order, then the batch inputs' targets. An input no request carries
            (optional) is left out; a batch input's target is computed whether named or not.
        model: the model's name, for the error text.
        layout: the model's ragged and batch inputs (``batch_layout(config)``); None: none.

    Returns:
        ``(feed, sizes)``: input name -> joined array, and ``requests[i].batch_size`` per request
        (what :func:`split_outputs` takes).

    Raises:
        InvalidArgument: an input that some requests of the batch carry and others do not."""
    layout = layout or _NO_LAYOUT
    sizes = [r.batch_size for r in requests]
    computed = {t: spec for spec in layout.inputs for t in spec.targets}
    if names is None:
        names = dict.fromkeys(name for r in requests for name in r.inputs)
    feed: dict[str, np.ndarray] = {}
    for name in [*names, *computed]:
        if name in feed:
            continue
        if name in computed:
            feed[name] = batch_input_array(computed[name], requests)
            continue
        arrays = [r.inputs[name] for r in requests if name in r.inputs]
        if not arrays:
            continue
        if len(arrays) != len(requests):
            raise InvalidArgument(
                f"optional input '{name}' of model '{model}' is in some requests of a batch "
                "but not in others"
            )
        if name in layout.ragged:
            feed[name] = flat_ragged(arrays)
        else:
            feed[name] = arrays[0] if len(arrays) == 1 else np.concatenate(arrays)
    return feed, sizes


def split_outputs(
    requests: Sequence[BackendRequest], outputs: dict[str, np.ndarray], sizes: Sequence[int],
    layout: BatchLayout | None = None,
) -> list[BackendResponse]:
    """One response per request: its ``sizes[i]`` rows of every output it asked for.

    For a batching model (``requests[0].batched``) every output must hold at least
    ``sum(sizes)`` rows; when one holds fewer (a model that reduces over the batch axis),
    it cannot be split, and every request that asked for it fails with
    :class:`~workbench.common.errors.Unsupported` (Triton's ``BackendOutputResponder`` text,
    "[request id: <id>] failed to split the output tensor '<name>' in responses: expected
    batch size of atleast <N> in model output, got <M>", N the batch of the execution,
    Triton's spelling) rather than
    receive rows computed from other requests' data. Triton fails only the requests past
    the rows there are; the earlier ones would get rows mixed from the whole batch, so
    here they fail too. Outputs of a non-batching model are returned whole.

    A ``batch_output`` target of the ``layout`` (``BATCH_SCATTER_WITH_INPUT_SHAPE``) is split
    by its source input's shape per request instead
    (:func:`~workbench.backends.ragged.scatter`); with too few elements its requests fail
    with :class:`~workbench.common.errors.Unsupported` likewise.
    """
    layout = layout or _NO_LAYOUT
    scattered = {n: scatter(layout.outputs[n], outputs[n], requests)
                 for n in layout.outputs.keys() & outputs.keys()}
    plain = {n: a for n, a in outputs.items() if n not in scattered}
    unsplittable = _unsplittable(requests, plain, sizes)
    unsplittable.update((n, parts) for n, parts in scattered.items() if isinstance(parts, str))
    if len(requests) == 1 and not unsplittable and not scattered:
        wanted = requests[0].requested_outputs or outputs.keys()
        return [BackendResponse({n: outputs[n] for n in wanted if n in outputs})]
    responses, start = [], 0
    for index, (request, size) in enumerate(zip(requests, sizes, strict=True)):
        wanted = request.requested_outputs or outputs.keys()
        broken = [unsplittable[n] for n in wanted if n in unsplittable]
        if broken:
            prefix = request_prefix(request.request_id)
            responses.append(BackendResponse(error=Unsupported(prefix + broken[0])))
        else:
            part = {n: _part(outputs[n], scattered.get(n), index, start, size, request.batched)
                    for n in wanted if n in outputs}
            responses.append(BackendResponse(part))
        start += size
    return responses


def _part(array: np.ndarray, parts: list[np.ndarray] | str | None, index: int, start: int,
          size: int, batched: bool) -> np.ndarray:
    """Request ``index``'s part of an output: its scattered part when the output is scattered,
    else its ``size`` rows from ``start`` (the whole output for a non-batching model)."""
    if isinstance(parts, list):
        return parts[index]
    return array[start : start + size] if batched else array


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
