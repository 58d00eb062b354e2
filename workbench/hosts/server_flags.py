"""``workbench serve``'s flags, generated from :class:`~workbench.ServerOptions`.

Every field is one flag: its :class:`~workbench.startup.flags.Flag` (tritonserver's spelling when it is
not ``--<field-name>``, aliases, parser, metavar), its type (bool: ``--flag``, ``--flag=true``
or ``--flag=false`` and the other on/off words; ``Literal``: the choices; ``list``: repeatable),
its docstring (the ``--help`` text) and its default. A flag left out keeps the field's value
from the ``WORKBENCH_*`` environment, else the field's default. The few tritonserver flags
that fill several fields, or one field another way (:data:`COMPOSITE_FLAGS`:
``--trace-config``, ``--backend-config``, ``--cache-config``, ``--disable-auto-complete-config``),
are parsed here; the fields they fill name them (``Flag(via=...)``).
"""

from __future__ import annotations

import argparse
import re
import sys
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal, Union, get_args, get_origin

from pydantic.fields import FieldInfo

from workbench import ServerOptions
from workbench.startup.flags import Flag, switch


def field_flags() -> Iterator[tuple[str, Flag, FieldInfo]]:
    """``(field name, Flag, field)`` of every ServerOptions field, in declaration order (fields
    without a Flag get the default one)."""
    for name, field in ServerOptions.model_fields.items():
        flag = next((m for m in field.metadata if isinstance(m, Flag)), Flag())
        yield name, flag, field


def flag_names(name: str, flag: Flag) -> list[str]:
    """The spellings of one field's flag: its name (``--`` + the field name with dashes unless
    the Flag names it), then its aliases."""
    return [flag.name or "--" + name.replace("_", "-"), *flag.aliases]


def _value_type(annotation: Any) -> tuple[Any, bool, tuple[str, ...] | None]:
    """``(type of one value, repeatable, choices)`` of a field's annotation."""
    repeat = False
    if get_origin(annotation) in (Union, types.UnionType):  # ``str | None``: the value's type
        annotation = next(arg for arg in get_args(annotation) if arg is not type(None))
    if get_origin(annotation) in (list, dict):
        repeat = True
        annotation = get_args(annotation)[0]
    if get_origin(annotation) is Literal:
        return str, repeat, get_args(annotation)
    return annotation, repeat, None


def _help(field: FieldInfo) -> str:
    """The field's docstring as one ``--help`` paragraph (reST markup dropped), with its default
    when the text does not tell it."""
    text = " ".join((field.description or "").split())
    text = re.sub(r":\w+:`~?([^`]+)`", r"\1", text).replace("``", "'")
    default = field.get_default(call_default_factory=True)
    if default not in (None, "", [], {}) and "default" not in text.lower():
        shown = str(default).lower() if isinstance(default, bool) else default
        text += f" (default {shown})"
    return text.replace("%", "%%")


def add_field_flag(parser: argparse.ArgumentParser, name: str, flag: Flag, field: FieldInfo) -> None:
    """Add one field's flag to ``parser`` (``dest`` = the field name, default None = not given)."""
    kind, repeat, choices = _value_type(field.annotation)
    options: dict[str, Any] = {"dest": name, "default": None, "help": _help(field),
                               "required": flag.required}
    if flag.metavar:
        options["metavar"] = flag.metavar
    if kind is bool and not repeat:
        options.update(type=flag.parse or switch, nargs="?", const=True)
    else:
        options.update(type=flag.parse or kind, choices=choices)
        if repeat:
            options["action"] = "append"
    parser.add_argument(*flag_names(name, flag), **options)


def _cache_byte_size(items: list[str]) -> int:
    """``["local,size=1048576"]`` -> 1048576 (tritonserver ``--cache-config``).

    Each item is ``<cache name>,<setting>=<value>``; items of one cache name make one cache's
    settings, as tritonserver gathers them. The ``local`` cache reads ``size`` and ignores the
    other settings; the last ``size`` given counts.

    Raises:
        SystemExit: a malformed item (tritonserver's texts: "No cache specified. ..." or
            "--cache-config option format is ..."); settings for more than one cache ("found
            multiple cache configurations, but only a single cache is currently supported",
            Triton core's text); a cache other than ``local``; a local cache without a
            byte-count ``size``.
    """
    settings: dict[str, dict[str, str]] = {}
    for item in items:
        name, comma, setting = item.partition(",")
        if not comma or not name:
            raise SystemExit("workbench: error: No cache specified. --cache-config option format is "
                             f"<cache name>,<setting>=<value>. Got {item}")
        key, equals, value = setting.partition("=")
        if not equals or not key or not value:
            raise SystemExit("workbench: error: --cache-config option format is "
                             f"'<cache name>,<setting>=<value>'. Got {item}")
        settings.setdefault(name, {})[key] = value
    if len(settings) > 1:
        raise SystemExit("workbench: error: found multiple cache configurations, but only a single "
                         "cache is currently supported")
    for name, values in settings.items():
        if name != "local":
            raise SystemExit(f"workbench: error: unsupported --cache-config cache '{name}' "
                             "(only 'local,size=<bytes>')")
        if not values.get("size", "").isdigit():
            raise SystemExit("workbench: error: Failed to initialize LocalCache: config didn't "
                             "contain a valid 'size' field.")
        return int(values["size"])
    return 0


#: ``--trace-config`` keys -> ServerOptions field, per mode ("" = the global settings)
_TRACE_KEYS = {
    "": {"level": "trace_level", "rate": "trace_rate", "count": "trace_count", "mode": "trace_mode"},
    "triton": {"file": "trace_file", "log-frequency": "trace_log_frequency"},
    "opentelemetry": {"url": "trace_opentelemetry_url", "resource": "trace_opentelemetry_resource",
                      "bsp_max_queue_size": "trace_opentelemetry_bsp_max_queue_size",
                      "bsp_schedule_delay": "trace_opentelemetry_bsp_schedule_delay",
                      "bsp_max_export_batch_size": "trace_opentelemetry_bsp_max_export_batch_size"},
}
_REPEATED_TRACE_FIELDS = ("trace_level", "trace_opentelemetry_resource")


def trace_level(value: str) -> str:
    """tritonserver's ``ParseTraceLevelOption`` (any case): ``false``/``off`` -> OFF;
    ``true``/``on``/``min``/``max``/``timestamps`` -> TIMESTAMPS; ``tensors`` -> TENSORS.

    Raises:
        SystemExit: another value ("invalid value for trace level option: <v>").
    """
    word = value.lower()
    if word in ("false", "off"):
        return "OFF"
    if word in ("true", "on", "min", "max", "timestamps"):
        return "TIMESTAMPS"
    if word == "tensors":
        return "TENSORS"
    raise SystemExit(f"workbench: error: invalid value for trace level option: {word}")


def _trace_config(items: list[str]) -> dict:
    """``["triton,file=/tmp/t.json", "level=TIMESTAMPS", "opentelemetry,url=..."]`` ->
    ServerOptions trace fields (tritonserver's ``ParseTraceConfigOption``: ``<mode>,<key>=<value>``
    or ``<key>=<value>`` for the global keys; a mode's keys apply in that mode only, as
    tritonserver reads them).

    Raises:
        SystemExit: an unknown mode or key, or a malformed item.
    """
    values: dict = {}
    for item in items:
        comma = item.find(",")
        equals = item.find("=", comma + 1)
        if comma == 0:
            raise SystemExit("workbench: error: No trace mode specified. --trace-config option format is "
                             f"<trace mode>,<setting>=<value> or <setting>=<value>. Got {item}")
        mode = item[:comma].lower() if comma > 0 else ""
        key, value = item[comma + 1:equals], item[equals + 1:]
        if equals < 0 or not key or not value:
            raise SystemExit("workbench: error: --trace-config option format is "
                             f"'<trace mode>,<setting>=<value>'. Got {item}")
        if mode not in _TRACE_KEYS:
            raise SystemExit(f"workbench: error: invalid value for trace mode option: {mode}. "
                             'Available options are "triton" and "opentelemetry"')
        field = _TRACE_KEYS[mode].get(key)
        if field is None:
            raise SystemExit(f"workbench: error: unsupported --trace-config '{item}'")
        if field == "trace_level":
            value = trace_level(value)
        elif field == "trace_mode":
            value = value.lower()
        if field in _REPEATED_TRACE_FIELDS:
            values.setdefault(field, []).append(value)
        else:
            values[field] = value
    return values


def _deprecated_trace_flag(flag: str, field: str, instead: str) -> CompositeFlag:
    """A deprecated tritonserver trace flag (``--trace-file`` ...): tritonserver's warning on
    stderr, then the value as ``--trace-config`` would set it (``--trace-config`` wins)."""

    def collect(items: list[str] | None) -> dict:
        if not items:
            return {}
        print(f"Warning: '{flag}' has been deprecated and will be removed in future releases. "
              f"Please use '--trace-config {instead} instead.", file=sys.stderr)
        if field == "trace_level":
            return {field: [trace_level(item) for item in items]}
        return {field: items[-1]}

    return CompositeFlag(flag, f"DEPRECATED: Please use --trace-config {instead}", collect, first=True)


#: ``--backend-config`` settings this server uses: (backend or "" for every backend, setting)
_BACKEND_SETTINGS = {("onnxruntime", "default-max-batch-size"): "default_max_batch_size",
                     ("", "default-max-batch-size"): "default_max_batch_size"}


def _backend_config(items: list[str]) -> dict:
    """``--backend-config`` items -> ServerOptions fields, parsed as tritonserver's
    ``ParseBackendConfigOption``: ``<backend>,<setting>=<value>`` or ``<setting>=<value>``.
    Settings this server has no use for (the python backend's ``shm-default-byte-size``,
    ``stub-timeout-seconds``, other backends' keys) print a warning and are ignored: Triton
    hands every setting to its backend and does not fail on unknown ones.

    Raises:
        SystemExit: a malformed item (Triton's texts).
    """
    values: dict = {}
    for item in items:
        comma = item.find(",")
        equals = item.find("=", comma + 1)
        if comma == 0:
            raise SystemExit("workbench: error: No backend specified. --backend-config option format "
                             "is <backend name>,<setting>=<value> or <setting>=<value>. Got " + item)
        backend = item[:comma] if comma > 0 else ""
        setting, value = item[comma + 1:equals], item[equals + 1:]
        if equals < 0 or not setting or not value:
            raise SystemExit("workbench: error: --backend-config option format is "
                             f"'<backend name>,<setting>=<value>'. Got {item}")
        field = _BACKEND_SETTINGS.get((backend, setting))
        if field is None:
            print(f"workbench: warning: --backend-config '{item}' has no effect here (setting "
                  "not used by this server)", file=sys.stderr)
            continue
        try:
            values[field] = int(value)
        except ValueError:
            raise SystemExit(f"workbench: error: --backend-config '{item}': expected an integer") from None
    return values



@dataclass(frozen=True, slots=True)
class CompositeFlag:
    """A tritonserver flag that is not one field's own (``--trace-config`` fills six fields).

    Attributes:
        name: the flag.
        help, metavar: its ``--help`` entry.
        collect: the flag's values (a list: every composite flag is repeatable; True/None for
            a ``store_true`` one) -> ServerOptions fields; raises SystemExit with
            tritonserver's text for a malformed value.
        store_true: a switch without a value.
        first: fill the fields before the fields' own flags (which then win).
    """

    name: str
    help: str
    collect: Callable[[Any], dict[str, Any]]
    metavar: str | None = None
    store_true: bool = False
    first: bool = False

    @property
    def dest(self) -> str:
        """The argparse destination (``--trace-config`` -> ``trace_config``)."""
        return self.name[2:].replace("-", "_")


#: tritonserver's flags that fill several fields, or one field another way than its own flag
COMPOSITE_FLAGS = (
    CompositeFlag("--disable-auto-complete-config", "same as --strict-model-config=true",
                  lambda given: {"strict_model_config": True} if given else {}, store_true=True),
    CompositeFlag("--backend-config", "BACKEND,KEY=VALUE, e.g. onnxruntime,default-max-batch-size=8 "
                  "(repeatable)", lambda items: _backend_config(items or [])),
    CompositeFlag("--trace-config", "level=OFF|TIMESTAMPS|TENSORS, rate=N, count=N, mode=triton|"
                  "opentelemetry, triton,file=PATH, triton,log-frequency=N, opentelemetry,url=URL, "
                  "opentelemetry,resource=K=V, opentelemetry,bsp_max_queue_size=N|bsp_schedule_delay=MS|"
                  "bsp_max_export_batch_size=N (repeatable)",
                  lambda items: _trace_config(items or []), metavar="[MODE,]KEY=VALUE"),
    # tritonserver's deprecated trace flags (before --trace-config, which wins)
    _deprecated_trace_flag("--trace-file", "trace_file", "triton,file=<filepath>"),
    _deprecated_trace_flag("--trace-level", "trace_level", "level=<OFF|TIMESTAMPS|TENSORS>"),
    _deprecated_trace_flag("--trace-rate", "trace_rate", "rate=<rate value>"),
    _deprecated_trace_flag("--trace-count", "trace_count", "count=<count value>"),
    _deprecated_trace_flag("--trace-log-frequency", "trace_log_frequency",
                           "triton,log-frequency=<log frequency value>"),
    CompositeFlag("--cache-config", "tritonserver's cache flag; only the 'local' cache exists here "
                  "(not with --response-cache-byte-size)",
                  lambda items: {"response_cache_byte_size": _cache_byte_size(items)} if items else {},
                  metavar="local,size=N", first=True),
)


def add_server_flags(parser: argparse.ArgumentParser) -> None:
    """Add every ServerOptions field's flag, then :data:`COMPOSITE_FLAGS`, to ``parser``."""
    for name, flag, field in field_flags():
        if not flag.via:
            add_field_flag(parser, name, flag, field)
    for composite in COMPOSITE_FLAGS:
        if composite.store_true:
            parser.add_argument(composite.name, action="store_true", help=composite.help)
        else:
            parser.add_argument(composite.name, action="append", default=None,
                                metavar=composite.metavar, help=composite.help)


def options_from_args(args: argparse.Namespace) -> ServerOptions:
    """Map parsed flags onto :class:`ServerOptions`: the flags given, the rest keep the
    ``WORKBENCH_*`` environment's values or the defaults.

    Raises:
        SystemExit: a malformed ``--backend-config``, ``--trace-config`` or ``--cache-config``
            item (unknown backend settings only warn); ``--cache-config`` with
            ``--response-cache-byte-size`` (tritonserver's "Incompatible flags" error).
        ValueError: a malformed ``--metrics-config`` item or out-of-range value (pydantic's
            ValidationError).
    """
    if args.cache_config and getattr(args, "response_cache_byte_size", None) is not None:
        raise SystemExit("workbench: error: Incompatible flags --response-cache-byte-size and "
                         "--cache-config both provided. Please provide one or the other.")
    composites = {c.name: c.collect(getattr(args, c.dest)) for c in COMPOSITE_FLAGS}
    values: dict[str, Any] = {}
    for composite in COMPOSITE_FLAGS:
        if composite.first:
            values.update(composites[composite.name])
    for name, flag, _field in field_flags():
        value = getattr(args, name, None)
        if flag.via or value is None:
            continue
        values[name] = flag.combine(value) if flag.combine is not None else value
    for composite in COMPOSITE_FLAGS:
        if not composite.first:
            values.update(composites[composite.name])
    return ServerOptions(**values)


__all__ = ["COMPOSITE_FLAGS", "CompositeFlag", "add_field_flag", "add_server_flags", "field_flags",
           "flag_names", "options_from_args"]
