"""One model selection shared by every tab of a dashboard session.

A person who picks ``digits_mlp`` in the Models tab expects the Config, Live and Tuning tabs
to open on ``digits_mlp`` too. :class:`ModelSelection` holds that choice (a model name and,
where one was picked, a version); each tab binds its own model dropdown to it with
:meth:`ModelSelection.bind`:

* a person's choice in any bound dropdown becomes the selection, and every other bound
  dropdown that offers that model follows;
* a dropdown that does not offer the selected model (the Tuning tab lists only the models it
  can load-test) keeps its own value: the selection is not changed by it, and it follows
  again as soon as the selection is a model it offers;
* changes a tab makes itself because its options changed (the selected model was unloaded
  and left the list, the first fill of an empty list) are not a person's choice and do not
  move the selection.

Plain Python (no Panel import): a bound widget is anything with ``value``, ``options`` and
``param.watch`` (Panel's ``Select``). Use it on the session's thread (the engine's loop).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def model_of(option: Any) -> str:
    """The model name of a dropdown option: the option itself (``"digits_mlp"``)."""
    return str(option) if option is not None else ""


def model_of_version_key(option: Any) -> str:
    """The model name of a ``"name/version"`` option (the Live tab's): ``"digits_mlp/2"``
    -> ``"digits_mlp"``."""
    return str(option).rpartition("/")[0] if option else ""


def version_of_version_key(option: Any) -> str:
    """The version of a ``"name/version"`` option: ``"digits_mlp/2"`` -> ``"2"``."""
    return str(option).rpartition("/")[2] if option else ""


class ModelSelection:
    """The model (and version) chosen in a dashboard session.

    Attributes:
        name: the selected model's name ("" before anything is chosen).
        version: the selected version as text ("" for "the model, any version").
    """

    def __init__(self) -> None:
        self.name = ""
        self.version = ""
        self._listeners: list[Callable[[ModelSelection], None]] = []
        self._setting = 0

    def choose(self, name: str, version: str = "") -> None:
        """Select ``name`` (and ``version``; "" for any) and move every bound dropdown that
        offers it. Choosing what is already selected does nothing."""
        if not name or (name, version) == (self.name, self.version):
            return
        self.name, self.version = name, version
        self._setting += 1
        try:
            for listener in list(self._listeners):
                listener(self)
        finally:
            self._setting -= 1

    def on_change(self, listener: Callable[[ModelSelection], None]) -> None:
        """Call ``listener(selection)`` after every change of the selection."""
        self._listeners.append(listener)

    def bind(self, select: Any, *, name_of: Callable[[Any], str] = model_of,
             version_of: Callable[[Any], str] | None = None) -> None:
        """Keep the dropdown ``select`` and the selection together (see the module docstring).

        Args:
            select: a Panel ``Select`` (``value``, ``options``, ``param.watch``).
            name_of: the model name of one of its options (default: the option itself;
                :func:`model_of_version_key` for ``"name/version"`` options).
            version_of: the version of one of its options, for dropdowns that list versions
                (:func:`version_of_version_key`); None: it lists models.
        """
        binding = _Binding(self, select, name_of, version_of)
        self.on_change(lambda _selection: binding.follow())
        select.param.watch(binding.on_options, "options")
        select.param.watch(binding.on_value, "value")
        binding.follow()


class _Binding:
    """One dropdown bound to a selection."""

    def __init__(self, selection: ModelSelection, select: Any, name_of: Callable[[Any], str],
                 version_of: Callable[[Any], str] | None) -> None:
        self.selection, self.select = selection, select
        self.name_of, self.version_of = name_of, version_of
        self._moving = False

    def options(self) -> list:
        options = self.select.options
        return list(options.values()) if isinstance(options, dict) else list(options or [])

    def wanted(self) -> Any | None:
        """The option the selection stands for here, or None when it offers none."""
        name, version = self.selection.name, self.selection.version
        matches = [o for o in self.options() if self.name_of(o) == name]
        if self.version_of is not None and version:
            exact = [o for o in matches if self.version_of(o) == version]
            matches = exact or matches
        if self.select.value in matches:
            return self.select.value
        return matches[-1] if matches else None  # the latest version listed

    def follow(self) -> None:
        wanted = self.wanted()
        if wanted is not None and wanted != self.select.value:
            self._moving = True
            try:
                self.select.value = wanted
            finally:
                self._moving = False

    def on_options(self, _event: Any) -> None:
        self.follow()

    def on_value(self, event: Any) -> None:
        if self._moving or self.selection._setting or event.new is None:
            return
        if event.old is None or event.old == "" or event.old not in self.options():
            self.follow()  # a first fill or a forced reset, not a person's choice
            return
        version = self.version_of(event.new) if self.version_of is not None else ""
        self.selection.choose(self.name_of(event.new), version)


__all__ = ["ModelSelection", "model_of", "model_of_version_key", "version_of_version_key"]
