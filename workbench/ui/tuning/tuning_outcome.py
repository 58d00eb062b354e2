"""The end of a Tuning tab run: the verdict, Apply, and the report's downloads.

* The verdict is the tuner's own reasoning (:attr:`workbench.tuning.Decision.why`), shown
  in place: what was chosen, what it beat, what was not trusted and why.
* **Apply** is enabled only when the decision says to apply (a stable point that beats the
  served config); otherwise it is disabled with the reason as its tooltip (every measurement
  unstable, the served config chosen, a gain within the tolerance, a run in progress). It
  writes the chosen setting with :func:`workbench.tuning.apply_result` (the Config tab's
  write: comments kept, validated, ``config.pbtxt.bak``, hot reload, taken back when the
  reload fails) and says what each write did (:func:`workbench.ui.shared.config_results.result_text`).
* **Downloads**: the report as HTML, CSV (one row per point) and JSON
  (:meth:`~workbench.tuning.TuneResult.html`, ``csv_text``, ``json_text``).
"""

from __future__ import annotations

import io

import panel as pn

from workbench.common.results import ConfigWriteResult
from workbench.tuning import TuneResult
from workbench.ui.shared.config_results import result_text
from workbench.ui.shared.store import AlertKind

#: Apply's label and its tooltips when disabled before or during a run, or after applying
APPLY = "Apply to config.pbtxt"
NO_RESULT = "run a search first: Apply writes the setting it recommends"
RUNNING = "a run is in progress"
APPLIED = "applied: config.pbtxt holds the chosen setting now"
#: the downloads: label -> (file suffix, the result's text)
EXPORTS = {"HTML report": ("html", TuneResult.html), "CSV": ("csv", TuneResult.csv_text),
           "JSON": ("json", TuneResult.json_text)}


class TuningOutcome:
    """The verdict, the Apply button and the downloads of the last result.

    Attributes:
        result: the result shown (None before the first run ends).
        verdict: its reasoning.
        apply_button: enabled only when the result says to apply.
        downloads: label -> its ``FileDownload``.
    """

    def __init__(self) -> None:
        self.result: TuneResult | None = None
        self.verdict = pn.pane.Markdown("", sizing_mode="stretch_width")
        self.apply_button = pn.widgets.Button(label=APPLY, disabled=True, description=NO_RESULT)
        self.downloads = {label: self._download(label, suffix, text)
                          for label, (suffix, text) in EXPORTS.items()}

    def layout(self) -> pn.viewable.Viewable:
        return pn.Column(self.verdict, pn.Row(self.apply_button, *self.downloads.values()),
                         sizing_mode="stretch_width")

    def clear(self) -> None:
        """No result (a run starts)."""
        self.result = None
        self.verdict.object = ""
        self._apply(False, RUNNING)
        for download in self.downloads.values():
            download.disabled = True

    def show(self, result: TuneResult) -> None:
        """Show ``result``'s verdict; Apply as its decision says; downloads enabled."""
        self.result = result
        head = "**Recommended:**" if result.decision.apply else "**Result:**"
        stopped = " *(stopped: a partial result)*" if result.stopped else ""
        self.verdict.object = f"{head}{stopped} {result.decision.why}"
        self._apply(result.decision.apply, None if result.decision.apply else result.decision.why)
        for label, download in self.downloads.items():
            download.disabled = False
            download.filename = f"{result.model}-tuning.{EXPORTS[label][0]}"

    def applied(self) -> None:
        """The chosen setting was written: nothing more to apply."""
        self._apply(False, APPLIED)

    def _apply(self, enabled: bool, why: str | None) -> None:
        self.apply_button.disabled, self.apply_button.description = not enabled, why

    def _download(self, label: str, suffix: str, text) -> pn.widgets.FileDownload:
        def content() -> io.BytesIO:
            assert self.result is not None, "the button is disabled without a result"
            return io.BytesIO(text(self.result).encode())

        return pn.widgets.FileDownload(callback=content, filename=f"tuning.{suffix}", label=label,
                                       embed=False, disabled=True, color="light")


def written_text(model: str, label: str, written: dict[str, ConfigWriteResult]) -> tuple[str, AlertKind]:
    """What an Apply did, one sentence per file written (:func:`result_text`), and the
    banner's kind (the worst of them)."""
    if not written:
        return f"{model}'s config.pbtxt already holds {label}: nothing written", "info"
    order: list[AlertKind] = ["success", "info", "warning", "danger"]
    texts, kinds = [], []
    for name, result in written.items():
        text, kind = result_text(f"wrote {label} into {result['path']}", result,
                                 f"the chosen setting of {name} is still in the report")
        texts.append(text)
        kinds.append(kind)
    return "\n\n".join(texts), max(kinds, key=order.index)


__all__ = ["APPLIED", "APPLY", "EXPORTS", "NO_RESULT", "RUNNING", "TuningOutcome", "written_text"]
