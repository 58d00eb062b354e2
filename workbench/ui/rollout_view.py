"""The dashboard's Rollout tab: a model's weighted split and mirror set, its live per-version
counts and the mirror's agreement, Promote and Roll back (``server.rollouts``,
``docs/rollouts.md``; a product extension, Triton has none).

The form is the rollout: weights as ``version:weight`` pairs (``1:90, 2:10``), the sticky
request parameter, the candidate version and the mirror share; **Set rollout** replaces the
model's rollout with it, **Clear** removes it. The report under it follows the engine every
tick (:meth:`RolloutView.tick`): requests per version (Triton's per-version statistics, what
``nv_inference_count`` counts), what the split routed where, and the mirror's counts, latency
and agreement per output. Engine errors are shown in place, as sentences.
"""

from __future__ import annotations

from typing import Any

import panel as pn

from workbench.ui.store import EngineStore, Spawned, user_text

#: the candidate dropdown's "no mirror" option
NO_CANDIDATE = "none"
#: why Promote is disabled (its tooltip)
NOTHING_TO_PROMOTE = "pick a candidate version to promote"


def parse_weights(text: str) -> dict[str, float]:
    """``"1:90, 2:10"`` -> ``{"1": 90.0, "2": 10.0}`` ("" -> {}).

    Raises:
        ValueError: a pair that is not ``version:number`` (the message says how to write it).
    """
    weights: dict[str, float] = {}
    for part in text.replace(";", ",").split(","):
        if not part.strip():
            continue
        version, colon, weight = part.partition(":")
        try:
            if not colon:
                raise ValueError
            weights[str(int(version.strip()))] = float(weight.strip())
        except ValueError:
            raise ValueError(f"weights: '{part.strip()}' is not version:weight (e.g. 1:90, 2:10)") from None
    return weights


def weights_text(weights: dict[str, float]) -> str:
    """:func:`parse_weights` reversed: ``{"1": 90.0}`` -> ``"1:90"``."""
    return ", ".join(f"{v}:{w:g}" for v, w in weights.items())


class RolloutView(pn.viewable.Viewer):
    """The Rollout tab of one dashboard session.

    Args:
        store: the session's engine.
    """

    def __init__(self, store: EngineStore, **params: Any) -> None:
        super().__init__(**params)
        self.store = store
        self.model = pn.widgets.Select(label="Model", options=[])
        self.weights = pn.widgets.TextInput(label="Weights", placeholder="1:90, 2:10", width=180)
        self.sticky = pn.widgets.TextInput(label="Sticky parameter", placeholder="(none)", width=150)
        self.candidate = pn.widgets.Select(label="Candidate", options=[NO_CANDIDATE], width=110)
        self.mirror = pn.widgets.IntInput(label="Mirror %", value=0, start=0, end=100, width=100)
        self.set_button = pn.widgets.Button(label="Set rollout", color="primary")
        self.clear_button = pn.widgets.Button(label="Clear")
        self.promote_button = pn.widgets.Button(label="Promote candidate", color="success", disabled=True,
                                                description=NOTHING_TO_PROMOTE)
        self.rollback_button = pn.widgets.Button(label="Roll back")
        self.status = pn.pane.Alert("", alert_type="success", visible=False)
        self.error = pn.pane.Alert("", alert_type="danger", visible=False)
        self.report = pn.pane.Markdown("", sizing_mode="stretch_width", css_classes=["workbench-rollout-report"])
        self._refreshing: Spawned | None = None
        #: edits a person made to the form (a fill that started before one keeps it)
        self._edits = 0
        self._filling = False
        #: the model the form was last filled for, and the edits counted then
        self._filled_for = ""
        self._edits_seen = 0
        for field in (self.weights, self.sticky, self.candidate, self.mirror):
            field.param.watch(self._on_edit, "value")
        self.candidate.param.watch(self._on_candidate, "value")
        self.model.param.watch(lambda _e: self.store.spawn(self.load_form()), "value")
        self.set_button.on_click(self.store.starter(self.apply))
        self.clear_button.on_click(self.store.starter(self.clear))
        self.promote_button.on_click(self.store.starter(self.promote))
        self.rollback_button.on_click(self.store.starter(self.rollback))
        self.store.selection.bind(self.model)

    def __panel__(self) -> pn.viewable.Viewable:
        return pn.Column(
            pn.Row(self.model, self.weights, self.sticky, self.candidate, self.mirror),
            pn.Row(self.set_button, self.clear_button, self.promote_button, self.rollback_button),
            self.error, self.status, self.report,
            sizing_mode="stretch_width", css_classes=["workbench-rollout"])

    # ----------------------------------------------------------------- engine calls
    async def refresh_models(self) -> None:
        """List the models with a version the engine knows."""
        index = await self.store.attempt(self.store.server.repository_index, self.show_error)
        if index is None:
            return
        names = sorted({row["name"] for row in index if row.get("version")})
        self.model.options = names
        if names and self.model.value not in names:
            self.model.value = names[0]

    async def load_form(self, force: bool = False) -> None:
        """Fill the form with the selected model's rollout and versions, and its report.

        What a person typed or picked is kept: during the fill (a late fill overwrote it, and
        Set rollout then set the old rollout), and since the last fill of the same model
        unless ``force`` (after an action: the form then shows what the engine has)."""
        name = self.model.value
        if not name:
            return
        edits = self._edits
        index = await self.store.attempt(self.store.server.repository_index, self.show_error)
        versions = sorted({row["version"] for row in index or [] if row["name"] == name and row.get("version")},
                          key=int)
        report = await self.store.attempt(lambda: self.store.engine.rollouts.get(name), self.show_error)
        rollout = (report or {}).get("rollout") or {}
        overwrite = self._edits == edits and (force or name != self._filled_for or edits == self._edits_seen)
        self._filling = True
        try:
            options = [NO_CANDIDATE, *versions]
            if self.candidate.options != options:
                self.candidate.options = options
            if overwrite:
                candidate = rollout.get("candidate")
                values = {self.weights: weights_text(rollout.get("weights", {})),
                          self.sticky: rollout.get("sticky", ""),
                          self.candidate: str(candidate) if candidate is not None else NO_CANDIDATE,
                          self.mirror: int(rollout.get("mirror_percent", 0))}
                for field, value in values.items():
                    if field.value != value:
                        field.value = value
                self._filled_for, self._edits_seen = name, self._edits
        finally:
            self._filling = False
        await self.refresh()

    def _on_candidate(self, event: Any) -> None:
        """Promote is offered only with a candidate version picked (or filled from the rollout)."""
        none = event.new in (None, NO_CANDIDATE)
        self.promote_button.disabled = none
        self.promote_button.description = NOTHING_TO_PROMOTE if none else None

    def _on_edit(self, _event: object) -> None:
        if not self._filling:
            self._edits += 1

    async def apply(self) -> None:
        """Set the form's rollout on the selected model."""
        self.clear_messages()
        try:
            weights = parse_weights(self.weights.value or "")
        except ValueError as exc:
            self.show_error(str(exc))
            return
        candidate = None if self.candidate.value in (None, NO_CANDIDATE) else self.candidate.value
        name = self.model.value
        done = await self.store.attempt(lambda: self.store.engine.rollouts.set(
            name, weights, sticky=(self.sticky.value or "").strip(), candidate=candidate,
            mirror_percent=self.mirror.value or 0), self.show_error)
        if done is not None:
            self.show_status(f"Rollout of '{name}' set.")
        await self.refresh()

    async def clear(self) -> None:
        """Remove the selected model's rollout."""
        self.clear_messages()
        name = self.model.value
        await self.store.attempt(lambda: self.store.engine.rollouts.clear(name), self.show_error)
        self.show_status(f"Rollout of '{name}' cleared: the latest READY version serves.")
        await self.load_form(force=True)

    async def promote(self) -> None:
        """Promote the candidate (the form's, else the rollout's)."""
        self.clear_messages()
        name = self.model.value
        version = None if self.candidate.value in (None, NO_CANDIDATE) else self.candidate.value
        done = await self.store.attempt(lambda: self.store.engine.rollouts.promote(name, version), self.show_error)
        if done is not None:
            if done["promoted"] is None:
                self.show_error(f"not promoted: {done['config']['reason']}")
            else:
                self.show_status(f"Version {done['promoted']} of '{name}' promoted: it is the one served "
                                 "version (Roll back undoes it).")
        await self.load_form(force=True)

    async def rollback(self) -> None:
        """Undo the selected model's last promote."""
        self.clear_messages()
        name = self.model.value
        done = await self.store.attempt(lambda: self.store.engine.rollouts.rollback(name), self.show_error)
        if done is not None:
            self.show_status(f"'{name}' rolled back to its version policy before the promote.")
        await self.load_form(force=True)

    async def refresh(self) -> None:
        """Show the selected model's live figures."""
        name = self.model.value
        if not name:
            self.report.object = ""
            return
        try:
            report = await self.store.engine.rollouts.get(name)
            stats = await self.store.engine.statistics(name)
        except Exception as exc:  # noqa: BLE001 - shown, e.g. the model was unloaded meanwhile
            self.report.object = f"*{user_text(exc)}*"
            return
        counts = {s["version"]: s["inference_count"] for s in stats["model_stats"]}
        text = report_markdown(report, counts)
        if text != self.report.object:  # no push (and no echo from a notebook) when unchanged
            self.report.object = text

    def tick(self) -> None:
        """The 1 s beat: list the models until there are some, then refresh the report (one
        refresh at a time)."""
        if self._refreshing is None or self._refreshing.done():
            self._refreshing = self.store.spawn(self.refresh() if self.model.options else self.refresh_models())

    # ----------------------------------------------------------------- messages
    def show_error(self, text: str) -> None:
        self.error.object, self.error.visible = text, True

    def show_status(self, text: str) -> None:
        self.status.object, self.status.visible = text, True

    def clear_messages(self) -> None:
        self.error.visible = self.status.visible = False


def report_markdown(report: dict[str, Any], counts: dict[str, int]) -> str:
    """The report as Markdown: requests per version, routed counts, the mirror's figures."""
    lines = ["| version | requests (statistics) | routed by the split |", "|---|---|---|"]
    routed = report.get("routed", {})
    for version in sorted(set(counts) | set(routed), key=int):
        lines.append(f"| {version} | {counts.get(version, 0)} | {routed.get(version, 0)} |")
    rollout = report.get("rollout")
    lines.append("")
    lines.append("No rollout: the latest READY version serves." if rollout is None else
                 f"Rollout: weights {weights_text(rollout['weights']) or '(none)'}"
                 + (f", sticky on '{rollout['sticky']}'" if rollout["sticky"] else ""))
    if report.get("promoted") is not None:
        lines.append(f"\nPromoted: version {report['promoted']} (Roll back undoes it).")
    mirror = report.get("mirror")
    if mirror:
        latency = mirror["latency_us"]
        lines += ["", f"**Mirror to version {mirror['candidate']}** ({mirror['percent']:g} %): "
                  f"mirrored {mirror['mirrored']}, shed {mirror['shed']}, "
                  f"candidate errors {mirror['candidate_errors']}",
                  "", "| latency µs | mean | p99 |", "|---|---|---|",
                  f"| primary | {_number(latency['primary']['mean'])} | {_number(latency['primary']['p99'])} |",
                  f"| candidate | {_number(latency['candidate']['mean'])} | {_number(latency['candidate']['p99'])} |",
                  "", "| output | metric | rows | agreement | max abs diff |", "|---|---|---|---|---|"]
        for output, figures in mirror["agreement"].items():
            agreement = figures["agreement"]
            shown = "–" if agreement is None else f"{agreement * 100:.1f} %"
            lines.append(f"| {output} | {figures['metric']} | {figures['rows']} | {shown} "
                         f"| {figures.get('max_abs_diff', 0):.3g} |")
        if mirror["last_error"]:
            lines.append(f"\nLast candidate error: {mirror['last_error']}")
    return "\n".join(lines)


def _number(value: float | None) -> str:
    return "–" if value is None else f"{value:.0f}"


__all__ = ["NO_CANDIDATE", "RolloutView", "parse_weights", "report_markdown", "weights_text"]
