"""Ensembles in the engine's model lifecycle: load order, the checks against the composing
models at load, stop order. Follows Triton's ``ModelRepositoryManager`` dependency graph
(``model_repository_manager.cc``: ``ConnectDependencyGraph``, ``CheckNode``,
``CircularDependencyCheck``) and ``ValidateEnsembleConfig`` (``ensemble_utils.cc``).

``dependencies`` everywhere maps a model name to the models its ensemble steps call
(empty for models that are not ensembles).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from pathlib import Path

from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.common.errors import InvalidModelConfig, WorkbenchError
from workbench.config.model_config import read_model_config
from workbench.config.normalize import is_ensemble
from workbench.config.validate_ensemble import (
    check_ensemble_steps,
    circular_dependency,
    composing_models,
)
from workbench.engine.models.registry import ModelEntry
from workbench.files.model_files import MAX_CONFIG_BYTES


def declared_dependencies(model_dir: Path | None, override: ModelConfig | None,
                          max_bytes: int = MAX_CONFIG_BYTES, config_name: str = "") -> list[str]:
    """The composing models a model's config file (or ``override``) names; [] for models
    that are not ensembles or whose config cannot be read (their load reports that).
    ``max_bytes``: the largest config file read (``--model-config-max-size``);
    ``config_name``: ``--model-config-name``."""
    config = override
    if config is None and model_dir is not None:
        try:
            config = read_model_config(model_dir, config_name, max_bytes)
        except WorkbenchError:
            return []
    if config is None or not is_ensemble(config):
        return []
    return composing_models(config)


def load_waves(dependencies: Mapping[str, Collection[str]]) -> list[list[str]]:
    """The models of ``dependencies`` in load order: waves loaded one after the other, the
    models of a wave concurrently. Models that call nothing about to load come first, then
    each ensemble once the models it calls have loaded (ensembles of ensembles included).
    Models on a cycle go in a wave of their own when nothing else can load (their load then
    fails with Triton's "circular dependency between ensembles" text), before the models
    that depend on them."""
    planned = set(dependencies)
    pending = {name: set(deps) & planned for name, deps in dependencies.items()}
    waves: list[list[str]] = []
    done: set[str] = set()
    while pending:
        wave = sorted(name for name, deps in pending.items() if deps <= done)
        if not wave:
            on_cycle = [n for n in pending if circular_dependency(n, dependencies)]
            wave = sorted(on_cycle or pending)
        waves.append(wave)
        done.update(wave)
        for name in wave:
            del pending[name]
    return waves


def ensemble_error(
    config: ModelConfig,
    entries: Mapping[str, ModelEntry],
    dependencies: Mapping[str, Collection[str]],
) -> str:
    """Why the ensemble ``config`` cannot serve with the models loaded now ("" when it can).

    In Triton's order and words: a circular dependency ("circular dependency between
    ensembles: a -> ... -> b -> a"); composing models absent from the repository, or unloaded
    (Triton drops an unloaded model from its dependency graph): "ensemble e contains models
    that are not available or ambiguous: x, y"; a composing model whose
    config is invalid ("ensemble 'e' depends on 'x' which is not valid. Model 'x' failed with
    error: ..."), that has no READY version ("ensemble 'e' depends on 'x' which has no loaded
    version." plus "Model 'x' loading failed with error: ..." when its load failed), or lacks
    the version a step names ("ensemble 'e' depends on 'x' whose required version 2 is not
    loaded."); a response cache on an ensemble that a decoupled composing model makes
    decoupled ("Response Cache does not currently support model e with 'decoupled'
    transaction policy. Please disable the response cache.", as Triton's config check of
    the ensemble once marked decoupled); then :func:`~workbench.config.validate_ensemble.check_ensemble_steps`
    against the composing models' configs.

    Args:
        config: the ensemble's normalized, validated config.
        entries: the server's models by name.
        dependencies: what every known model calls (this ensemble's entry is replaced by
            ``config``'s steps).
    """
    name = config.name
    composing = composing_models(config)
    cycle = circular_dependency(name, {**dependencies, name: composing})
    if cycle:
        return cycle
    missing = [m for m in composing if m not in entries or entries[m].unloaded()]
    if missing:
        listed = ", ".join(missing)
        return f"ensemble {name} contains models that are not available or ambiguous: {listed}"
    for model in composing:
        entry = entries[model]
        prefix = f"ensemble '{name}' depends on '{model}'"
        invalid = entry.reason and entry.reason != "unloaded" and not entry.versions
        if entry.config is None or invalid:
            failure = entry.failure_reason()
            return f"{prefix} which is not valid. Model '{model}' failed with error: {failure}"
        ready = entry.ready_versions()
        if not ready:
            failure = entry.failure_reason() if entry.failed() else ""
            detail = f" Model '{model}' loading failed with error: {failure}" if failure else ""
            return f"{prefix} which has no loaded version.{detail}"
        for step in config.ensemble_scheduling.step:
            version = step.model_version
            if step.model_name == model and version != -1 and version not in ready:
                return f"{prefix} whose required version {version} is not loaded."
    try:
        decoupled = check_ensemble_steps(config, {m: entries[m].config for m in composing})
    except InvalidModelConfig as exc:
        return exc.message
    if decoupled and config.response_cache.enable:  # Triton marks it decoupled, then refuses
        return (f"Response Cache does not currently support model {name} with 'decoupled' "
                "transaction policy. Please disable the response cache.")
    return ""


def with_transaction_policy(config: ModelConfig, entries: Mapping[str, ModelEntry]) -> ModelConfig:
    """``config`` with ``model_transaction_policy.decoupled`` set as Triton sets it at load:
    True when a decoupled composing model feeds the ensemble, else False (a copy when that
    changes the config; ``config`` itself otherwise).

    Args:
        config: an ensemble config that passed :func:`ensemble_error`.
        entries: the server's models by name.
    """
    composing = {m: c for m in composing_models(config) if (c := entries[m].config) is not None}
    decoupled = check_ensemble_steps(config, composing)
    if config.model_transaction_policy.decoupled == decoupled:
        return config
    marked = ModelConfig()
    marked.CopyFrom(config)
    marked.model_transaction_policy.decoupled = decoupled
    return marked


def ensemble_labels(
    config: ModelConfig, own: Mapping[str, list[str]], entries: Mapping[str, ModelEntry]
) -> dict[str, list[str]]:
    """The classification labels of an ensemble's outputs: its own (``label_filename`` in
    its folder, ``own``), and for every output without them the labels of the composing
    model output that produces it, from the version the step names (its latest READY one
    for -1). Triton completes the ensemble's label provider so at load
    (``model_lifecycle.cc``); labels are taken once, at load.

    Args:
        config: the ensemble's config, checked by :func:`ensemble_error` (its composing
            models are READY).
        own: the ensemble's labels read from its own label files, by output name.
        entries: the server's models by name.
    """
    labels = dict(own)
    outputs = {io.name for io in config.output}
    for step in config.ensemble_scheduling.step:
        entry = entries.get(step.model_name)
        if entry is None:
            continue
        state = entry.versions.get(step.model_version) if step.model_version != -1 else None
        model = state.model if state is not None else entry.latest_ready
        if model is None:
            continue
        for model_output, tensor in step.output_map.items():
            if tensor in outputs and not labels.get(tensor) and model.labels.get(model_output):
                labels[tensor] = list(model.labels[model_output])
    return labels


def stop_waves(
    entries: Mapping[str, ModelEntry], dependencies: Mapping[str, Collection[str]]
) -> list[list[ModelEntry]]:
    """Entries grouped for stopping: ensembles before the models they call (outermost
    first), so in-flight ensemble requests finish their steps before those models drain."""
    depth: dict[str, int] = {}

    def depth_of(name: str, path: frozenset[str]) -> int:
        if name not in depth:
            calls = [d for d in dependencies.get(name, ()) if d in entries and d not in path]
            below = [depth_of(d, path | {name}) for d in calls]
            depth[name] = 1 + max(below) if below else 0
        return depth[name]

    levels: dict[int, list[ModelEntry]] = {}
    for name, entry in entries.items():
        levels.setdefault(depth_of(name, frozenset()), []).append(entry)
    return [levels[level] for level in sorted(levels, reverse=True)]


__all__ = [
    "declared_dependencies", "ensemble_error", "ensemble_labels", "load_waves", "stop_waves",
    "with_transaction_policy",
]
