"""The Tuning tab: a load sweep against a model from the dashboard, plotted as it runs, and
a comparison of candidate config settings (what Model Analyzer does offline).

* **Run** measures each load level of the form (:mod:`workbench.ui.tuning_form`) with
  ``workbench perf``'s load generator (:func:`workbench.perf.sweep`) through an
  :class:`~workbench.perf.InProcessClient`, on the engine's loop: each step's point goes on
  the plot (:mod:`workbench.ui.tuning_plot`) and its row in the table (perf_analyzer's
  columns, :func:`workbench.perf.json_records`; :mod:`workbench.ui.tuning_table` shows
  the ones read at a glance) as soon as it is measured.
* With candidate settings, the served config is swept first (unless unticked), then each
  candidate is *tried* as a load with a config override and swept as its own series
  (:mod:`workbench.ui.tuning_runs`); at the end, stopped or not, the model is reloaded from
  ``config.pbtxt``. A candidate that fails to load or to measure is reported and skipped.
* **Stop** cancels the run: the step in progress stops at once and is not reported.
* The knee of each setting (:func:`workbench.perf.knee`) and its best step under the p99
  target (:func:`workbench.perf.best_under_sla`) are marked; changing the target re-marks.
* **Apply best** writes the best tested candidate's knobs into ``config.pbtxt`` as the
  Config tab does (comments kept, validated atomic write with ``.bak``, hot reload), and
  makes the tuned model the session's selected model (:mod:`workbench.ui.selection`), so
  the Config tab shows that model with the new file.

The model list offers the models the tab can sweep now (READY, neither sequence nor
decoupled) and says why each other one is not offered; under it, the knobs the selected model
is served with now. Errors (model not READY, a bad input file, a refused override) are shown
in place, in words without Python exception names; each action clears the banners of the one
before, and what cannot run (Apply best with nothing better to apply, Run during a run) is
disabled, with the reason as its tooltip.
"""

from __future__ import annotations

import asyncio

import panel as pn
import param
from google.protobuf import text_format

from workbench.config_edits.knobs import read_knobs
from workbench.perf import InProcessClient, PerfError, StepResult, json_records, knee, prepare_workload, sweep
from workbench.ui.config_results import result_text
from workbench.ui.store import AlertKind, EngineStore, Spawned, user_text
from workbench.ui.tuning_form import SweepPlan, TuningForm
from workbench.ui.tuning_plot import TuningPlot
from workbench.ui.tuning_runs import (
    best_setting,
    keep_candidate,
    restore_file_config,
    series_best,
    served_config,
    sweepable_models,
    try_candidate,
)
from workbench.ui.tuning_settings import Candidate
from workbench.ui.tuning_table import StepTable

#: the series name of the config served when the run started
SERVED = "served config"
#: why Apply best cannot run (its tooltip, and the answer when called anyway)
NOTHING_TO_APPLY = "no tested candidate beats the served config: nothing to apply"

HELP = """\
Sweeps a load over the model and plots **throughput (inferences/s) against p99 latency (ms)**.
The load generator runs *inside* this process, on the engine's event loop (perf_analyzer's C
API mode): the numbers measure the engine and leave out HTTP/gRPC, and at high rates the
generator's own work competes with the engine. Use `workbench perf -i grpc` for the network
path. A sweep takes about *levels × (warm-up + window)*; the knee (▲) is the last level before
more load mostly buys queueing; ★ is each setting's best step under the p99 target (without a
target, its highest throughput). Candidate settings are tried as temporary loads (the file
is untouched) and the model is reloaded from `config.pbtxt` at the end; **Apply best** writes
the winning candidate into `config.pbtxt` (backup kept as `config.pbtxt.bak`).
"""


class TuningView(pn.viewable.Viewer):
    """The Tuning tab of one dashboard session.

    :meth:`start` (the Run button) and :meth:`stop` may be called from Python too; the run
    itself is the coroutine :meth:`run`, spawned on the engine's loop.
    """

    steps_done = param.Integer(default=0, doc="steps measured in the current run")
    running = param.Boolean(default=False, doc="a run is in progress")

    def __init__(self, store: EngineStore, **params) -> None:
        super().__init__(**params)
        self.store = store
        self.form = TuningForm()
        self.plot_pane = pn.pane.Bokeh(None, sizing_mode="stretch_width")
        self.plot = TuningPlot(self.plot_pane)
        self.plot_pane.object = self.plot.figure
        self.results: dict[str, list[StepResult]] = {}
        self.candidates: dict[str, Candidate] = {}
        self.model_name = ""
        self.best: str | None = None
        #: the measured steps: the setting, then perf_analyzer's columns (µs, infer/s)
        self.steps = StepTable()
        self.table = self.steps.widget
        self.summary = pn.pane.Markdown("", sizing_mode="stretch_width")
        self.run_button = pn.widgets.Button(label="Run", color="primary", width=90)
        self.stop_button = pn.widgets.Button(label="Stop", disabled=True, width=90)
        self.apply_button = pn.widgets.Button(label="Apply best to config.pbtxt", disabled=True,
                                              description=NOTHING_TO_APPLY)
        self.refresh_button = pn.widgets.Button(label="↻ models", width=90)
        self.status = pn.pane.Alert("", alert_type="info", visible=False)
        self.error = pn.pane.Alert("", alert_type="danger", visible=False)
        #: the knobs the selected model is served with now
        self.served = pn.pane.Markdown("", sizing_mode="stretch_width")
        #: the models not offered, and why
        self.not_offered = pn.pane.Markdown("", sizing_mode="stretch_width")
        #: why each model of the repository is not in the model list
        self.reasons: dict[str, str] = {}
        self._task: Spawned | None = None

        def run(_event: object) -> None:  # a widget callback returns None, not the task
            self.start()

        self.run_button.on_click(run)
        self.stop_button.on_click(lambda _e: self.stop())
        self.apply_button.on_click(self.store.starter(self.apply_best))
        self.refresh_button.on_click(self.store.starter(self.refresh_models))
        self.form.sla_ms.param.watch(lambda _e: self._judge(), "value")
        self.form.model.param.watch(lambda e: self.store.spawn(self.show_served(e.new)), "value")
        # the session's selected model, where this tab offers it
        store.selection.bind(self.form.model)

    def __panel__(self) -> pn.viewable.Viewable:
        return pn.Column(
            pn.pane.Markdown(HELP, sizing_mode="stretch_width"), self.served, self.not_offered,
            self.form.layout(),
            pn.Row(self.run_button, self.stop_button, self.refresh_button, self.apply_button),
            self.error, self.status, self.plot_pane, self.summary, self.steps.layout(),
            sizing_mode="stretch_width")

    # ----------------------------------------------------------------- actions
    async def refresh_models(self) -> None:
        """List the models the tab can sweep now in the model dropdown (the selection kept
        when it still can be swept, else the first), and say why the others are not there."""
        found = await self.store.attempt(lambda: sweepable_models(self.store.server),
                                         self.show_error, user_text)
        if found is None:
            return
        names, self.reasons = found
        self.form.model.options = names
        if self.form.model.value not in names:
            self.form.model.value = names[0] if names else None
        await self.show_served(self.form.model.value)
        self.run_button.disabled = self.running or not names
        self.run_button.description = None if names else "no model here can be swept now"
        self.not_offered.object = ("Not offered: " + "; ".join(
            f"**{name}**: {why}" for name, why in self.reasons.items())) if self.reasons else ""

    async def show_served(self, name: str | None) -> None:
        """Show the knobs ``name`` is served with now (what a candidate changes)."""
        if not name:
            self.served.object = ""
            return
        try:
            knobs = read_knobs(await served_config(self.store.server, name))
        except Exception as exc:  # noqa: BLE001 - unloaded meanwhile: said in place
            self.served.object = f"*{name}: {user_text(exc)}*"
            return
        if self.form.model.value == name:
            self.served.object = f"**{name}** is served now with: {_knobs_line(knobs)}"

    def start(self) -> Spawned | None:
        """Start a run from the form, unless one is running; returns its task (or None when
        the form is invalid: the error is shown)."""
        if self.running:
            return None
        self.error.visible = self.status.visible = False  # the last action's banners
        try:
            plan = self.form.plan()
        except (PerfError, ValueError) as exc:
            self.show_error(str(exc))
            return None
        self._reset(plan)
        self._task = self.store.spawn(self.run(plan))
        # a run cancelled before it began never reaches its own clean-up
        self._task.add_done_callback(lambda _t: self._finish("stopped") if self.running else None)
        return self._task

    def stop(self) -> None:
        """Cancel the run in progress (the model is still reloaded from its file after a
        comparison). Does nothing when none runs."""
        if self._task is not None and not self._task.done():
            self.stop_button.disabled = True
            self._task.cancel()

    async def run(self, plan: SweepPlan) -> None:
        """Sweep ``plan``'s settings in turn (see the module docstring). Cancelling it is
        Stop; errors are shown, never raised."""
        server, name = self.store.server, plan.options.model_name
        client = InProcessClient(server)
        tried = False
        outcome = "done"
        try:
            base = await served_config(server, name)
            await prepare_workload(client, plan.options)  # the inputs, before any change
            settings: list[Candidate | None] = [None] if plan.include_served else []
            for candidate in (*settings, *plan.candidates):
                label = SERVED if candidate is None else candidate.label
                if candidate is not None:
                    self._say(f"loading {label}")
                    tried = True
                    if not await self._attempt(lambda c=candidate: try_candidate(server, name, base, c),
                                               label):
                        continue
                    self.candidates[label] = candidate
                await self._attempt(lambda label=label: self._sweep(client, plan, label), label)
        except asyncio.CancelledError:
            outcome = "stopped"
            raise
        except Exception as exc:  # noqa: BLE001 - model not ready, bad inputs: shown in place
            outcome = "failed"
            self.show_error(_message(exc))
        finally:
            if tried:
                self._say("reloading the model from config.pbtxt")
                await self._attempt(lambda: restore_file_config(server, name), "restore")
            self._finish(outcome)

    async def apply_best(self) -> None:
        """Write the best tested candidate into ``config.pbtxt`` and reload; shows the result
        (or why not) in place."""
        self.error.visible = False
        candidate = self.candidates.get(self.best or "")
        if candidate is None:
            self.show_error(NOTHING_TO_APPLY)
            return
        self._say(f"writing {candidate.label} into config.pbtxt")
        try:
            result = await keep_candidate(self.store.server, self.model_name, candidate)
        except Exception as exc:  # noqa: BLE001 - shown in place
            self.show_error(_message(exc))
        else:
            # the session's selected model: the Config tab shows the tuned model's new file
            if self.store.selection.name != self.model_name:  # (its version kept when it is)
                self.store.selection.choose(self.model_name)
            await self.show_served(self.form.model.value)
            self._say(*result_text(f"wrote {candidate.label} into {result['path']}", result,
                                   "the candidate stays in the results table"))

    # ----------------------------------------------------------------- run steps
    async def _sweep(self, client: InProcessClient, plan: SweepPlan, label: str) -> None:
        self.plot.series(label)
        self.results[label] = []
        async for result in sweep(client, plan.options, plan.levels):
            self._say(f"{label}: {result.level} measured ({len(self.results[label]) + 1}/"
                      f"{len(plan.levels)})")
            self.results[label].append(result)
            self.plot.add(label, result)
            self._add_row(label, result)
            self._judge()
            self.steps_done += 1

    async def _attempt(self, action, label: str) -> bool:
        """Await ``action()``; a failure is added to the error pane under ``label``."""
        try:
            await action()
            return True
        except Exception as exc:  # noqa: BLE001 - one setting's failure does not end the run
            self.show_error(f"{label}: {_message(exc)}", add=True)
            return False

    def _reset(self, plan: SweepPlan) -> None:
        self.model_name = plan.options.model_name
        self.results, self.candidates, self.best = {}, {}, None
        self.plot.reset()
        self.steps.clear()
        self.summary.object = ""
        self.error.visible = False
        self.steps_done = 0
        self.running = True
        self.run_button.disabled, self.stop_button.disabled = True, False
        self.apply_button.disabled = True
        self._say(f"sweeping {self.model_name}")

    def _finish(self, outcome: str) -> None:
        self.running = False
        self.run_button.disabled, self.stop_button.disabled = False, True
        steps = f"{self.steps_done} step{'s' if self.steps_done != 1 else ''}"
        self._say(f"{outcome}: {steps} measured in {len(self.results)} setting(s)",
                  "warning" if outcome == "failed" else "info")
        self._judge()

    def _add_row(self, label: str, result: StepResult) -> None:
        self.steps.add(label, json_records([result])[0])

    # ----------------------------------------------------------------- reading results
    def _judge(self) -> None:
        """Mark the knees and best steps, write the summary, choose the best setting."""
        sla_us = self.form.sla_p99_us()
        knees = {label: knee(results) for label, results in self.results.items()}
        best = {label: series_best(results, sla_us) for label, results in self.results.items()}
        self.plot.mark(knees, best, sla_us / 1000 if sla_us is not None else None)
        self.best = best_setting(self.results, sla_us)
        target = f"p99 ≤ {sla_us / 1000:g} ms" if sla_us is not None else "no p99 target"
        lines = [f"**{label}** — knee: {_step(knees[label])}; best ({target}): {_step(best[label])}"
                 for label in self.results]
        if self.best is not None:
            lines.append(f"**Best tested setting: {self.best}**")
        self.summary.object = "\n\n".join(lines)
        self.apply_button.disabled = self.running or self.best not in self.candidates
        self.apply_button.description = (None if not self.apply_button.disabled else
                                         "a run is in progress" if self.running else NOTHING_TO_APPLY)

    def _say(self, text: str, kind: AlertKind = "info") -> None:
        self.status.alert_type, self.status.object, self.status.visible = kind, text, True

    def show_error(self, text: str, add: bool = False) -> None:
        """Show ``text`` in the error pane (after what it shows when ``add``); outside a run
        the status banner, about an earlier action, is hidden."""
        if add and self.error.visible and self.error.object:
            text = f"{self.error.object}\n\n{text}"
        self.error.object, self.error.visible = text, True
        if not self.running:
            self.status.visible = False


def _message(exc: Exception) -> str:
    """One line for the error pane: what the user's input caused (a measurement's
    :class:`~workbench.perf.PerfError`, a knob value, a config file that does not parse) as
    its text; engine errors and bugs as :func:`~workbench.ui.store.user_text` words them
    (never a Python exception name)."""
    if isinstance(exc, (PerfError, ValueError, text_format.ParseError)):
        return str(exc)
    return user_text(exc)


def _knobs_line(knobs) -> str:
    """The served knobs in a candidate's words (``max_queue_delay_us=0 ...``)."""
    preferred = ",".join(str(s) for s in knobs.preferred_batch_sizes) or "none"
    return (f"max_batch_size={knobs.max_batch_size} "
            f"dynamic_batching={'true' if knobs.dynamic_batching else 'false'} "
            f"preferred_batch_sizes={preferred} max_queue_delay_us={knobs.max_queue_delay_us} "
            f"instance_count={knobs.instance_count} instance_kind={knobs.instance_kind}")


def _step(result: StepResult | None) -> str:
    if result is None:
        return "none"
    return (f"{result.level} ({result.throughput_infer_per_s:.1f} infer/s, "
            f"p99 {result.p99_us / 1000:.2f} ms)")


def tuning_tab(store: EngineStore) -> TuningView:
    """The dashboard's default Tuning tab builder: the view, with its model list filled on
    the engine's loop."""
    view = TuningView(store)
    store.spawn(view.refresh_models())
    return view


__all__ = ["HELP", "SERVED", "TuningView", "tuning_tab"]
