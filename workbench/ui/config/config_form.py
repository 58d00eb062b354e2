"""The Config tab's knob form: one widget per :class:`~workbench.config_edits.knobs.ConfigKnobs`
field, and the knobs that do not apply to the open model disabled, each with its reason (in
its tooltip and in a note under the form: e.g. the dynamic batcher's knobs on a
sequence-batched model, :func:`~workbench.config_edits.knobs.knob_reasons`)."""

from __future__ import annotations

from typing import Any

import panel as pn

from workbench.config_edits.knobs import INSTANCE_KINDS, KNOB_LABELS, ConfigKnobs

#: width of the knob widgets, pixels
FORM_WIDTH = 240


class KnobForm:
    """The knob widgets (:meth:`widgets`) and the note on the knobs that do not apply."""

    def __init__(self) -> None:
        width = {"width": FORM_WIDTH}
        labels = KNOB_LABELS
        self.max_batch_size = pn.widgets.IntInput(label=labels["max_batch_size"], start=0, **width)
        self.dynamic_batching = pn.widgets.Checkbox(label=labels["dynamic_batching"], **width)
        self.preferred = pn.widgets.TextInput(label=labels["preferred_batch_sizes"],
                                              placeholder="empty", **width)
        self.delay = pn.widgets.IntInput(label=labels["max_queue_delay_us"], start=0, step=100, **width)
        self.priorities = pn.widgets.IntInput(label=labels["priority_levels"], start=0, **width)
        self.count = pn.widgets.IntInput(label=labels["instance_count"], start=1, value=1, **width)
        self.kind = pn.widgets.Select(label=labels["instance_kind"], options=list(INSTANCE_KINDS), **width)
        self.cache = pn.widgets.Checkbox(label=labels["response_cache"], **width)
        #: the backend's thread and stream counts (0: the backend's default)
        self.intra_op = pn.widgets.IntInput(label=labels["intra_op_threads"], start=0, **width)
        self.inter_op = pn.widgets.IntInput(label=labels["inter_op_threads"], start=0, **width)
        self.streams = pn.widgets.IntInput(label=labels["streams"], start=0, **width)
        #: the knobs that do not apply to the open model, and why
        self.not_applicable = pn.pane.Markdown("", width=FORM_WIDTH, visible=False,
                                               css_classes=["workbench-knobs-not-applicable"])

    def by_knob(self) -> dict[str, Any]:
        """Knob name (a ``ConfigKnobs`` field) -> its widget (Panel input widgets: ``value``,
        ``disabled``, ``description``)."""
        return {"max_batch_size": self.max_batch_size, "dynamic_batching": self.dynamic_batching,
                "preferred_batch_sizes": self.preferred, "max_queue_delay_us": self.delay,
                "priority_levels": self.priorities, "instance_count": self.count,
                "instance_kind": self.kind, "response_cache": self.cache,
                "intra_op_threads": self.intra_op, "inter_op_threads": self.inter_op,
                "streams": self.streams}

    def widgets(self) -> list[pn.widgets.Widget]:
        return list(self.by_knob().values())

    def knobs(self) -> ConfigKnobs:
        """Raises:
            ValueError: preferred batch sizes are not positive integers."""
        try:
            preferred = tuple(int(v) for v in (self.preferred.value or "").replace(",", " ").split())
        except ValueError:
            raise ValueError(f"preferred batch sizes '{self.preferred.value}' are not "
                             "integers") from None
        if any(size < 1 for size in preferred):
            raise ValueError("preferred batch sizes must be at least 1")
        return ConfigKnobs(
            max_batch_size=self.max_batch_size.value or 0, dynamic_batching=self.dynamic_batching.value,
            preferred_batch_sizes=preferred, max_queue_delay_us=self.delay.value or 0,
            priority_levels=self.priorities.value or 0, instance_count=self.count.value or 1,
            instance_kind=self.kind.value, response_cache=self.cache.value,
            intra_op_threads=self.intra_op.value or 0, inter_op_threads=self.inter_op.value or 0,
            streams=self.streams.value or 0)

    def show(self, knobs: ConfigKnobs, reasons: dict[str, str]) -> None:
        """Show ``knobs``; disable the knobs named in ``reasons`` (knob -> why it does not
        apply), with their reason as tooltip and in the note."""
        self.max_batch_size.value = knobs.max_batch_size
        self.dynamic_batching.value = knobs.dynamic_batching
        self.preferred.value = ", ".join(str(s) for s in knobs.preferred_batch_sizes)
        self.delay.value = knobs.max_queue_delay_us
        self.priorities.value = knobs.priority_levels
        self.count.value = knobs.instance_count
        self.kind.value = knobs.instance_kind
        self.cache.value = knobs.response_cache
        self.intra_op.value = knobs.intra_op_threads
        self.inter_op.value = knobs.inter_op_threads
        self.streams.value = knobs.streams
        for name, widget in self.by_knob().items():
            widget.disabled = name in reasons
            widget.description = reasons.get(name)
        notes: dict[str, list[str]] = {}
        for name, reason in reasons.items():
            notes.setdefault(reason, []).append(KNOB_LABELS[name])
        self.not_applicable.object = "\n".join(
            f"- *not for this model*: {', '.join(names)}: {reason}" for reason, names in notes.items())
        self.not_applicable.visible = bool(reasons)


__all__ = ["FORM_WIDTH", "KnobForm"]
