"""The banner that says what a config write or revert did (the Config tab's Apply and
Revert, the Tuning tab's Apply), from the engine's ``ConfigWriteResult``."""

from __future__ import annotations

from workbench.common.results import ConfigWriteResult
from workbench.ui.shared.store import AlertKind


def result_text(what: str, result: ConfigWriteResult, text_left: str) -> tuple[str, AlertKind]:
    """The banner and its kind.

    Args:
        what: the action done, e.g. ``"written <path>"``.
        result: what the engine's ``write_model_config`` / ``revert_model_config`` returned.
        text_left: where the text that was not kept is still to be found (said when the
            reload failed and the file that served before was put back).

    Returns:
        The backup kept and whether the model reloaded (else why): ``success``, or
        ``warning`` when it did not, or when ensembles calling the model cannot serve now
        (each named with why); ``danger`` when the text was not kept.
    """
    if not result["kept"]:
        return (f"{result['path']} is unchanged: the reload failed, so the file that served "
                f"before was put back ({text_left}): {result['reason']}", "danger")
    backup = f"; previous file kept as {result['backup']}" if result["backup"] else ""
    kind: AlertKind = "success" if result["reloaded"] else "warning"
    text = f"{what}{backup}; " + ("reloaded" if result["reloaded"] else f"not reloaded: {result['reason']}")
    if result["dependents"]:
        text, kind = text + "; but " + "; ".join(result["dependents"]), "warning"
    return text, kind


__all__ = ["result_text"]
