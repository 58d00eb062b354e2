"""The engine side of the Tuning tab's model list: which models it can tune now, and what
each is served with.

* Offer (:func:`sweepable_models`): the models the tab can load-test now (READY, neither
  sequence nor decoupled: ``workbench perf`` sends no sequences and reads no streams), and
  why each other one is not offered.
* Show (:func:`served_config`, :func:`knobs_line`): the config a model serves with now and
  its knobs in the search space's words (``instance_count=1 max_batch_size=64 ...``).

The search itself, its temporary loads and its Apply are :mod:`workbench.tuning`'s.
"""

from __future__ import annotations

from dataclasses import fields

from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.config_edits.knobs import read_knobs
from workbench.remote import AnyServer
from workbench.tuning.space import show_value


async def sweepable_models(server: AnyServer) -> tuple[list[str], dict[str, str]]:
    """The repository's models split for the model list: ``(names, reasons)``, the names the
    tab can sweep now (sorted) and, for every other model, why not (not loaded, a sequence
    model, a decoupled model; the rule of :class:`workbench.perf.ModelInfo`)."""
    ready: set[str] = set()
    names: set[str] = set()
    for row in await server.repository_index():
        names.add(row["name"])
        if row.get("state") == "READY":
            ready.add(row["name"])
    offered: list[str] = []
    reasons: dict[str, str] = {}
    for name in sorted(names):
        if name not in ready:
            reasons[name] = "not loaded (load it in the Models tab)"
            continue
        try:
            config = await server.model_config(name)
        except Exception:  # noqa: BLE001 - unloaded meanwhile
            reasons[name] = "not loaded (load it in the Models tab)"
            continue
        reason = unsweepable_reason(config)
        if reason is None:
            offered.append(name)
        else:
            reasons[name] = reason
    return offered, reasons


def unsweepable_reason(config: ModelConfig) -> str | None:
    """Why the load generator cannot measure a model served with ``config`` (None: it can):
    a sequence model needs correlation ids and start / end flags, a decoupled one streams
    its responses; ``workbench perf`` sends plain requests only (as perf_analyzer without
    ``--sequence-length`` / ``--streaming``)."""
    if config.HasField("sequence_batching"):
        return "a sequence model (the load generator sends no sequences)"
    if config.model_transaction_policy.decoupled:
        return "decoupled (the load generator does not read streamed responses)"
    return None


async def served_config(server: AnyServer, name: str) -> ModelConfig:
    """A copy of the config ``name`` serves with now.

    Raises:
        ModelNotFound / ModelNotReady: unknown, or no version READY.
    """
    config = ModelConfig()
    config.CopyFrom(await server.model_config(name))
    return config


def knobs_line(config: ModelConfig) -> str:
    """The knobs ``config`` is served with, as a search space writes them
    (``max_batch_size=8 dynamic_batching=true preferred_batch_sizes=none ...``)."""
    knobs = read_knobs(config)
    return " ".join(f"{f.name}={show_value(getattr(knobs, f.name))}" for f in fields(knobs))


__all__ = ["knobs_line", "served_config", "sweepable_models", "unsweepable_reason"]
