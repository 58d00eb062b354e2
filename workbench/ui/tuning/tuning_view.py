"""The Tuning tab: the tuner (:class:`workbench.tuning.Tuner`, the engine behind
``workbench tune`` and ``workbench.tuning.tune``) run from the dashboard, plotted as it runs.

* The form (:mod:`workbench.ui.tuning.tuning_form`) shows the search space before the run, filled
  from the chosen model's served config and this machine; **Run** reads it into a
  :class:`~workbench.tuning.TuneSpec` (invalid input: a clear error in place, nothing runs)
  and runs a :class:`~workbench.tuning.Tuner` on the engine in this process, on the engine's
  loop. Each point goes on the plot (:mod:`workbench.ui.tuning.tuning_plot`) and into the table
  (:mod:`workbench.ui.tuning.tuning_table`) as it is measured; the progress bar counts points
  (against the strategy's plan when it has one) and says what is being measured.
* **Stop** calls :meth:`Tuner.stop`: the window in progress is dropped, the model is
  reloaded from ``config.pbtxt`` and the partial result is shown and judged as any other
  (never applied from unstable points). **Resume** continues the model's stopped run: every
  run keeps its points in a resume file per model in a temporary folder of the session
  (:attr:`TuneSpec.resume`), which Run starts afresh and Resume reads.
* The verdict, Apply and the report's downloads: :mod:`workbench.ui.tuning.tuning_outcome`. After
  Apply the tuned model is the session's selected model (:mod:`workbench.ui.shared.selection`), so
  the Config tab shows it with the new file.

The model list offers the models the tab can measure now (READY, neither sequence nor
decoupled) and says why each other one is not offered; under it, the knobs the selected
model is served with. Errors are shown in place, in words without Python exception names;
each action clears the banners of the one before, and what cannot run is disabled with the
reason as its tooltip.
"""

from __future__ import annotations

import shutil
import tempfile
import weakref
from pathlib import Path

import panel as pn
import param
from google.protobuf import text_format

from workbench.perf import PerfError
from workbench.tuning import Machine, NothingToApply, TuneEvent, Tuner, TuneResult, TuneSpec, apply_result
from workbench.ui.shared.store import AlertKind, EngineStore, Spawned, user_text
from workbench.ui.tuning.tuning_form import TuningForm
from workbench.ui.tuning.tuning_outcome import TuningOutcome, written_text
from workbench.ui.tuning.tuning_plot import TuningPlot
from workbench.ui.tuning.tuning_runs import knobs_line, served_config, sweepable_models
from workbench.ui.tuning.tuning_table import PointTable, live_row

#: Resume's tooltip while there is no stopped run of the model to continue
NOTHING_TO_RESUME = "enabled after a run of this model is stopped: continues it from the points it measured"

HELP = """\
Searches the model's config knobs for the best setting under your goals, as `workbench tune`
and `workbench.tuning.tune` do (the same tuner): **quick** climbs from the served config one
knob step at a time, **brute** measures every setting of the space. Every setting is tried as a
temporary load of the served model (the file is untouched; **while the run lasts, every client of
the model is served by the candidate settings, and the model's statistics restart at each load**:
tune on a model that takes no production traffic) at increasing load, each point measured window after
window until three agree within the stability tolerance; an unstable point (hollow) is shown
but never recommended. The load generator runs *inside* this process, on the engine's loop:
the numbers leave out HTTP/gRPC. **Apply** writes the recommended setting into `config.pbtxt`
(backup kept as `config.pbtxt.bak`).
"""


class TuningView(pn.viewable.Viewer):
    """The Tuning tab of one dashboard session.

    :meth:`start` (Run, or Resume with ``resume=True``) and :meth:`stop` may be called from
    Python too; the run itself is the coroutine :meth:`run`, spawned on the engine's loop.
    """

    points_done = param.Integer(default=0, doc="points measured in the current run")
    running = param.Boolean(default=False, doc="a run is in progress")

    def __init__(self, store: EngineStore, **params) -> None:
        super().__init__(**params)
        self.store = store
        self.form = TuningForm()
        self.plot_pane = pn.pane.Bokeh(None, sizing_mode="stretch_width")
        self.plot = TuningPlot(self.plot_pane)
        self.plot_pane.object = self.plot.figure
        self.points = PointTable()
        self.table = self.points.widget
        self.outcome = TuningOutcome()
        self.tuner: Tuner | None = None
        self.run_button = pn.widgets.Button(label="Run", color="primary", width=90)
        self.stop_button = pn.widgets.Button(label="Stop", disabled=True, width=90)
        self.resume_button = pn.widgets.Button(label="Resume", disabled=True, width=90,
                                               description=NOTHING_TO_RESUME)
        self.refresh_button = pn.widgets.Button(label="↻ models", width=90)
        self.progress = pn.indicators.Progress(value=0, max=1, visible=False, sizing_mode="stretch_width")
        self.status = pn.pane.Alert("", alert_type="info", visible=False)
        self.error = pn.pane.Alert("", alert_type="danger", visible=False)
        #: the knobs the selected model is served with now; the models not offered, and why
        self.served = pn.pane.Markdown("", sizing_mode="stretch_width")
        self.not_offered = pn.pane.Markdown("", sizing_mode="stretch_width")
        self.reasons: dict[str, str] = {}
        #: the models whose last run was stopped (Resume continues it)
        self.stopped: set[str] = set()
        self._folder = tempfile.mkdtemp(prefix="workbench-tuning-resume-")
        weakref.finalize(self, shutil.rmtree, self._folder, True)
        self._task: Spawned | None = None
        def run(_event: object) -> None:  # a widget callback returns None, not the task
            self.start()

        def resume(_event: object) -> None:
            self.start(resume=True)

        self.run_button.on_click(run)
        self.resume_button.on_click(resume)
        self.stop_button.on_click(lambda _e: self.stop())
        self.outcome.apply_button.on_click(self.store.starter(self.apply))
        self.refresh_button.on_click(self.store.starter(self.refresh_models))
        self.form.model.param.watch(lambda e: self._chosen(e.new), "value")
        store.selection.bind(self.form.model)  # the session's selected model, where offered

    def __panel__(self) -> pn.viewable.Viewable:
        return pn.Column(
            pn.pane.Markdown(HELP, sizing_mode="stretch_width"), self.served, self.not_offered,
            self.form.layout(),
            pn.Row(self.run_button, self.stop_button, self.resume_button, self.refresh_button),
            self.error, self.status, self.progress, self.outcome.layout(), self.plot_pane,
            self.points.layout(), sizing_mode="stretch_width")

    # ----------------------------------------------------------------- the model
    async def refresh_models(self) -> None:
        """List the models the tab can tune now (the selection kept when it still can be,
        else the first), and say why the others are not there."""
        found = await self.store.attempt(lambda: sweepable_models(self.store.server), self.show_error, user_text)
        if found is None:
            return
        names, self.reasons = found
        self.form.model.options = names
        if self.form.model.value not in names:
            self.form.model.value = names[0] if names else None
        await self.show_served(self.form.model.value)
        self.run_button.disabled = self.running or not names
        self.run_button.description = None if names else "no model here can be measured now"
        self.not_offered.object = ("Not offered: " + "; ".join(
            f"**{name}**: {why}" for name, why in self.reasons.items())) if self.reasons else ""

    async def show_served(self, name: str | None, prefill: tuple[str, str] | None = None) -> None:
        """Show the knobs ``name`` is served with now; with ``prefill`` (the form's
        :meth:`~TuningForm.typed` text when ``name`` was picked), fill the form's search
        space from its served config and this machine where nobody typed since."""
        if not name:
            self.served.object = ""
            return
        try:
            config = await served_config(self.store.server, name)
        except Exception as exc:  # noqa: BLE001 - unloaded meanwhile: said in place
            self.served.object = f"*{name}: {user_text(exc)}*"
            return
        if self.form.model.value == name:
            if prefill is not None:
                self.form.prefill(config, Machine.read(), since=prefill)
            self.served.object = f"**{name}** is served now with: {knobs_line(config)}"

    def _chosen(self, name: str | None) -> None:
        self._resume_state()
        self.store.spawn(self.show_served(name, prefill=self.form.typed()))

    # ----------------------------------------------------------------- a run
    def resume_file(self, model: str) -> Path:
        """The resume file of ``model``'s runs in this session."""
        return Path(self._folder) / f"{model}.json"

    def start(self, resume: bool = False) -> Spawned | None:
        """Start a run from the form (``resume``: continue the model's stopped run), unless
        one is running; returns its task (None when the form is invalid: the error is shown)."""
        if self.running:
            return None
        self.error.visible = self.status.visible = False  # the last action's banners
        model = self.form.model.value or ""
        try:
            spec = self.form.spec(str(self.resume_file(model)) if model else None)
        except (PerfError, ValueError) as exc:
            self.show_error(str(exc))
            return None
        if resume and model not in self.stopped:
            self.show_error(f"{model} has no stopped run to resume")
            return None
        if not resume:
            self.resume_file(model).unlink(missing_ok=True)  # a new run starts afresh
        self.tuner = Tuner(self.store.tuning_target(), spec, on_event=self._on_event)
        self._reset(spec, resume)
        self._task = self.store.spawn(self.run(self.tuner))
        return self._task

    def stop(self) -> None:
        """Stop the run in progress (:meth:`Tuner.stop`; its partial result is shown).
        Does nothing when none runs."""
        if self.running and self.tuner is not None:
            self.stop_button.disabled = True
            self._say("stopping: the window in progress is dropped, the model loaded again with its config")
            self.tuner.stop()

    async def run(self, tuner: Tuner) -> TuneResult | None:
        """Run ``tuner`` and show its result (see the module docstring). Errors are shown,
        never raised."""
        result = None
        try:
            result = await tuner.run()
        except Exception as exc:  # noqa: BLE001 - model not ready, bad inputs: shown in place
            self.show_error(_message(exc), add=True)
        finally:
            self._finish(result)
        return result

    async def apply(self) -> None:
        """Write the result's chosen setting into ``config.pbtxt`` and reload; shows what
        each write did (or why not) in place."""
        self.error.visible = False
        result = self.outcome.result
        if result is None or result.chosen is None or not result.decision.apply:
            self.show_error(result.decision.why if result is not None else "run a search first")
            return
        label = result.chosen.setting.label
        self._say(f"writing {label} into config.pbtxt")
        try:
            written = await apply_result(self.store.server, result)
        except NothingToApply as exc:
            self.show_error(str(exc))
            return
        except Exception as exc:  # noqa: BLE001 - shown in place
            self.show_error(_message(exc))
            return
        if all(w["kept"] for w in written.values()):
            self.outcome.applied()
        if self.store.selection.name != result.model:  # the Config tab shows the tuned model
            self.store.selection.choose(result.model)
        await self.show_served(self.form.model.value)
        self._say(*written_text(result.model, label, written))

    # ----------------------------------------------------------------- progress
    def _on_event(self, event: TuneEvent) -> None:
        planned = event.planned
        # -1: no plan, an indeterminate bar; the bound first (the value may not exceed it)
        self._progress(event.points if planned else -1, max(planned or 1, event.points, 1))
        counted = f"{event.points} of {planned}" if planned else f"{event.points}"
        self._say(f"{counted} points measured — {event.text}")
        if event.kind == "point" and event.point is not None and self.tuner is not None:
            lab = self.tuner.lab
            memory = lab.memory_mb.get(event.point.setting.label) if lab is not None else None
            self.plot.add(event.point)
            self.points.add(live_row(event.point, self.tuner.spec.goals, memory))
            self.points_done += 1
        elif event.kind == "failed":
            self.show_error(event.text, add=True)

    def _reset(self, spec: TuneSpec, resume: bool) -> None:
        goals = spec.goals
        self.plot.reset(goals.percentile, goals.sla_ms)
        self.points.reset(goals.percentile)
        self.outcome.clear()
        self.points_done = 0
        self.running = True
        self.run_button.disabled = self.resume_button.disabled = True
        self.resume_button.description = RUNNING_TIP
        self.stop_button.disabled = False
        self._progress(-1, 1)
        self.progress.visible = True
        self._say(f"{'resuming' if resume else 'tuning'} {spec.model}: {spec.strategy} search")

    def _finish(self, result: TuneResult | None) -> None:
        self.running = False
        self.run_button.disabled, self.stop_button.disabled = False, True
        self.progress.visible = False
        if result is None:
            self.outcome.clear()
            self.outcome.apply_button.description = "the run failed: nothing to apply"
            self._say("failed: see the error above", "warning")
        else:
            self._show(result)
        self._resume_state()

    def _show(self, result: TuneResult) -> None:
        (self.stopped.add if result.stopped else self.stopped.discard)(result.model)
        decision = result.decision
        self.plot.mark(result.chosen, kept=not decision.apply and decision.chosen is not None and (
            decision.baseline is None or decision.chosen.setting != decision.baseline.setting),
            served=result.space.baseline().label)
        self.points.show(result.rows())
        self.outcome.show(result)
        if result.failures:
            self.show_error("Not measured: " + "; ".join(f"{k}: {v}" for k, v in result.failures.items()),
                            add=True)
        outcome = "stopped" if result.stopped else "done"
        self._say(f"{outcome}: {result.measurements} points measured ({result.windows} windows) in "
                  f"{result.wall_s:.0f} s", "warning" if result.stopped else "info")

    def _progress(self, value: int, top: int) -> None:
        self.progress.value = -1  # within any bound
        self.progress.max = top
        self.progress.value = value

    def _resume_state(self) -> None:
        can = not self.running and self.form.model.value in self.stopped
        self.resume_button.disabled = not can
        self.resume_button.description = None if can else RUNNING_TIP if self.running else NOTHING_TO_RESUME

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


#: a button's tooltip while a run is in progress
RUNNING_TIP = "a run is in progress"


def _message(exc: Exception) -> str:
    """One line for the error pane: what the user's input caused (a measurement's
    :class:`~workbench.perf.PerfError`, a space or a goal, a config file that does not parse)
    as its text; engine errors and bugs as :func:`~workbench.ui.shared.store.user_text` words them
    (never a Python exception name)."""
    if isinstance(exc, (PerfError, ValueError, text_format.ParseError)):
        return str(exc)
    return user_text(exc)


def tuning_tab(store: EngineStore) -> TuningView:
    """The dashboard's default Tuning tab builder: the view, with its model list filled on
    the engine's loop."""
    view = TuningView(store)
    store.spawn(view.refresh_models())
    return view


__all__ = ["HELP", "NOTHING_TO_RESUME", "TuningView", "tuning_tab"]
