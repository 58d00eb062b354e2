"""Tuning an ensemble (or a BLS model) by its composing models, under its end-to-end SLA.

The load goes to the ensemble; the settings are the knobs of the models it runs, written
``model/knob`` (``minilm_encoder/instance_count``). Which models those are is read from
what the server did, not only from the config: a short load on the model with every
model's statistics read around it (:func:`step_models`) shows the declared steps *and* the
models a BLS step calls through ``pb_utils.InferenceRequest``, which no config declares.
Model Analyzer reads the ensemble's config only, so it cannot tune an ensemble containing a
BLS step; the workbench sees every step's statistics. Each point then carries every step's
utilization (:mod:`workbench.tuning.steps`), and the quick search tries the busiest step's
knobs first.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.config_edits.knobs import knob_reasons, read_knobs
from workbench.perf import LoadLevel, PerfOptions, Workload, run_step
from workbench.tuning.machine import Machine
from workbench.tuning.space import SearchSpace
from workbench.tuning.steps import all_statistics, called_models, step_figures
from workbench.tuning.targets import Target

#: the probe load that finds the models an ensemble runs: one request at a time, this long (ms)
PROBE_MS = 500


def is_composite(config: ModelConfig) -> bool:
    """An ensemble, or a Python model (which may call others through BLS)."""
    return (config.platform == "ensemble" or config.HasField("ensemble_scheduling")
            or config.backend == "python")


async def step_models(target: Target, config: ModelConfig, workload: Workload, perf: PerfOptions) -> list[str]:
    """The models ``config``'s model runs, busiest first: its declared ensemble steps and
    every model that executed during a short probe load (BLS calls included). Models that
    are themselves ensembles are left out (their own steps are listed)."""
    declared = [step.model_name for step in config.ensemble_scheduling.step]
    before = await all_statistics(target.client)
    probe = PerfOptions(perf.model_name, perf.model_version, perf.batch_size, perf.input_data, perf.shapes,
                        measurement_interval_ms=PROBE_MS, warmup_ms=0, continue_on_error=True,
                        server_stats=False)
    started = time.monotonic()
    await run_step(target.client, workload, LoadLevel.concurrency(1), probe)
    figures = step_figures(before, await all_statistics(target.client), time.monotonic() - started, {})
    seen = called_models(figures, config.name)
    names = [*seen, *(d for d in declared if d not in seen)]
    out = []
    for name in dict.fromkeys(names):
        try:
            step = await target.served_config(name)
        except Exception:  # noqa: BLE001 - unloaded meanwhile: not tunable now
            continue
        if not (step.platform == "ensemble" or step.HasField("ensemble_scheduling")):
            out.append(name)
    return out


def ensemble_space(steps: Mapping[str, ModelConfig], machine: Machine, levels: tuple[LoadLevel, ...]) -> SearchSpace:
    """The default space of an ensemble: per composing model (``model/knob``), instance
    counts up to the cores and, where the model batches, dynamic batching with queue delays
    of 0 and 500 µs and ``max_batch_size`` at its own and twice it (capped at 64)."""
    axes: dict[str, tuple[object, ...]] = {}
    served: dict[str, object] = {}
    counts = tuple(c for c in (1, 2, 4) if c <= max(machine.cores, 1))
    for name, config in steps.items():
        reasons = knob_reasons(config)
        knobs = read_knobs(config)
        if "instance_count" not in reasons and len(counts) > 1:
            axes[f"{name}/instance_count"] = tuple(sorted({*counts, knobs.instance_count}))
            served[f"{name}/instance_count"] = knobs.instance_count
        if knobs.max_batch_size > 0 and "max_queue_delay_us" not in reasons:
            axes[f"{name}/max_queue_delay_us"] = tuple(sorted({0, 500, knobs.max_queue_delay_us}))
            served[f"{name}/max_queue_delay_us"] = knobs.max_queue_delay_us
            if "dynamic_batching" not in reasons and not knobs.dynamic_batching:
                axes[f"{name}/dynamic_batching"] = (False, True)
                served[f"{name}/dynamic_batching"] = False
    return SearchSpace(axes, levels, served)


__all__ = ["PROBE_MS", "ensemble_space", "is_composite", "step_models"]
