"""The engine side of the Tuning tab: try a candidate setting without keeping it, put the
file's config back, choose the best tested setting, and keep it.

* Try (:func:`try_candidate`): a load of the model with the served config changed by the
  candidate's knobs (Triton's load API with a ``config`` override, as the Models tab tries a
  version policy, :mod:`workbench.config_edits.overrides`); ``config.pbtxt`` is not written.
* Restore (:func:`restore_file_config`): a plain load, which reads ``config.pbtxt`` again
  (an override tried earlier, in this tab or the Models tab, is dropped with it).
* Choose (:func:`best_setting`): per setting, the best step under the p99 target
  (:func:`workbench.perf.best_under_sla`), or without a target the highest throughput of a
  step without failed requests; the setting with the highest such throughput wins.
* Offer (:func:`sweepable_models`): the models the tab can load-test now (READY, neither
  sequence nor decoupled: ``workbench perf`` sends no sequences and reads no streams), and
  why each other one is not offered.
* Keep (:func:`keep_candidate`): the candidate's knobs written into ``config.pbtxt`` by the
  Config tab's comment-preserving rewrite (:func:`~workbench.config_edits.knobs.with_knob`) and
  ``write_model_config`` (validated atomic write, ``.bak`` backup, hot reload).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench import Server
from workbench.config_edits.knobs import read_knobs, with_knob
from workbench.config_edits.overrides import override_config
from workbench.perf import StepResult, best_under_sla
from workbench.results import ConfigWriteResult
from workbench.ui.tuning_settings import Candidate


async def sweepable_models(server: Server) -> tuple[list[str], dict[str, str]]:
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


async def served_config(server: Server, name: str) -> ModelConfig:
    """A copy of the config ``name`` serves with now.

    Raises:
        ModelNotFound / ModelNotReady: unknown, or no version READY.
    """
    config = ModelConfig()
    config.CopyFrom(await server.model_config(name))
    return config


async def try_candidate(server: Server, name: str, base: ModelConfig, candidate: Candidate) -> dict:
    """Reload ``name`` with ``base`` changed by ``candidate``'s knobs; the file is not
    written. Returns the config JSON loaded.

    Raises:
        ValueError: a knob value ``apply_knobs`` refuses.
        Unavailable: the server is not in explicit model control mode.
        InvalidArgument / InvalidModelConfig: the load failed (the serving versions stay).
    """
    knobs = replace(read_knobs(base), **candidate.values)
    override = override_config(base, knobs=knobs)
    await server.load_model(name, config=override)
    return override


async def restore_file_config(server: Server, name: str) -> None:
    """Reload ``name`` from its ``config.pbtxt`` (what a run of candidates leaves behind).

    Raises:
        Unavailable: not in explicit mode; InvalidArgument: the file no longer loads.
    """
    await server.load_model(name)


def series_best(results: Sequence[StepResult], sla_p99_us: float | None) -> StepResult | None:
    """The best step of one setting: :func:`~workbench.perf.best_under_sla` under
    ``sla_p99_us`` (**µs**); without a target (None), the highest throughput among steps
    without failed requests. None when no step qualifies."""
    if sla_p99_us is not None:
        return best_under_sla(results, sla_p99_us)
    clean = [r for r in results if r.error_count == 0]
    return max(clean, key=lambda r: (r.throughput_infer_per_s, -r.level.value), default=None)


def best_setting(series: Mapping[str, Sequence[StepResult]],
                 sla_p99_us: float | None) -> str | None:
    """The label of the setting whose :func:`series_best` step has the highest throughput
    (on a tie, the first in ``series``' order); None when no setting has a qualifying step."""
    best_label, best_throughput = None, -1.0
    for label, results in series.items():
        step = series_best(results, sla_p99_us)
        if step is not None and step.throughput_infer_per_s > best_throughput:
            best_label, best_throughput = label, step.throughput_infer_per_s
    return best_label


async def keep_candidate(server: Server, name: str, candidate: Candidate) -> ConfigWriteResult:
    """Write ``candidate``'s knobs into ``name``'s ``config.pbtxt`` (only the values they
    change are rewritten; comments, indent and list style stay, inside the rewritten blocks
    too) and apply it (hot reload in explicit mode). The write is refused when the file
    changed between reading and writing it (``expected_version``).

    Returns:
        ``write_model_config``'s result (``ConfigWriteResult``: ``kept`` False when the reload
        failed and the file that served was put back).

    Raises:
        ModelNotFound: no such model folder.
        google.protobuf.text_format.ParseError: the file on disk does not parse.
        InvalidModelConfig: the changed text does not validate (nothing is written).
        ConfigConflict: the file changed meanwhile (nothing is written).
        ValueError: a knob that does not apply to the model.
        Unsupported: a model mirrored from a remote repository.
    """
    described = await server.config_files.model_config_file(name)
    text = with_knob(described["text"], **candidate.values)
    return await server.config_files.write_model_config(name, text,
                                                        expected_version=described["version"])


__all__ = [
    "best_setting",
    "keep_candidate",
    "restore_file_config",
    "series_best",
    "served_config",
    "sweepable_models",
    "try_candidate",
    "unsweepable_reason",
]
