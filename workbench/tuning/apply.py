"""Keep a tuning result: write the chosen knobs into each changed model's ``config.pbtxt``.

Each write is the Config tab's: only the values that change are rewritten (comments, indent
and list style kept, :func:`workbench.config_edits.knobs.with_knob`), validated as loading
would, written atomically with the previous file kept as ``config.pbtxt.bak``, and applied
by a hot reload; a write whose reload fails is taken back (``kept: false``). The file must
not have changed since it was read (``expected_version``). Only a recommendation made from
stable points is ever written (:attr:`workbench.tuning.decide.Decision.apply`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from workbench.common.results import ConfigWriteResult
from workbench.config_edits.knobs import parse_text, with_knob
from workbench.tuning.result import TuneResult
from workbench.tuning.targets import completed_knobs

if TYPE_CHECKING:
    from workbench.remote import AnyServer


class NothingToApply(ValueError):
    """The result recommends no config change (the reason is the message)."""


async def apply_result(server: AnyServer, result: TuneResult) -> dict[str, ConfigWriteResult]:
    """Write the chosen setting of ``result`` into the config files of the models it
    changes (the tuned model; an ensemble's steps); returns each write's result by model.

    Raises:
        NothingToApply: the result recommends nothing, or the served config.
        ConfigConflict: a file changed since it was read (nothing more is written).
        InvalidModelConfig, ValueError, ParseError: as ``write_model_config`` and
            :func:`~workbench.config_edits.knobs.with_knob`.
    """
    chosen = result.decision.chosen
    if chosen is None or not result.decision.apply:
        raise NothingToApply(result.decision.why)
    written: dict[str, ConfigWriteResult] = {}
    for name, knobs in chosen.setting.by_model(result.model).items():
        described = await server.config_files.model_config_file(name)
        knobs = completed_knobs(parse_text(described["text"]), knobs)
        text = with_knob(described["text"], **knobs)  # type: ignore[arg-type]
        if text == described["text"]:
            continue
        written[name] = await server.config_files.write_model_config(
            name, text, expected_version=described["version"])
    return written


__all__ = ["NothingToApply", "apply_result"]
