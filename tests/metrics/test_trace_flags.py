"""tritonserver's trace flags: ``--trace-config`` per mode and the deprecated ``--trace-*`` spellings
(``command_line_parser.cc``: warnings, ``ParseTraceLevelOption``, ``ParseTraceConfigOption``)."""

from __future__ import annotations

import pytest

from workbench import ServerOptions
from workbench.hosts.cli import build_parser, options_from_args


def parse(*flags: str) -> ServerOptions:
    return options_from_args(build_parser().parse_args(["serve", "--model-repository=r", *flags]))


def test_deprecated_trace_flags_warn_and_apply(capsys) -> None:
    options = parse("--trace-file=/tmp/t.json", "--trace-level=TIMESTAMPS", "--trace-level=TENSORS",
                    "--trace-rate=5", "--trace-count=7", "--trace-log-frequency=3")
    assert (options.trace_file, options.trace_level, options.trace_rate, options.trace_count,
            options.trace_log_frequency) == ("/tmp/t.json", ["TIMESTAMPS", "TENSORS"], 5, 7, 3)
    err = capsys.readouterr().err
    assert ("Warning: '--trace-file' has been deprecated and will be removed in future releases. "
            "Please use '--trace-config triton,file=<filepath> instead.") in err
    for flag, instead in (("--trace-level", "level=<OFF|TIMESTAMPS|TENSORS>"), ("--trace-rate", "rate=<rate value>"),
                          ("--trace-count", "count=<count value>"),
                          ("--trace-log-frequency", "triton,log-frequency=<log frequency value>")):
        assert f"Warning: '{flag}' has been deprecated" in err and f"'--trace-config {instead} instead." in err


def test_trace_config_wins_over_a_deprecated_flag() -> None:
    assert parse("--trace-rate=5", "--trace-config", "rate=9").trace_rate == 9


@pytest.mark.parametrize(("given", "level"), [("MIN", "TIMESTAMPS"), ("max", "TIMESTAMPS"), ("on", "TIMESTAMPS"),
                                              ("true", "TIMESTAMPS"), ("Tensors", "TENSORS"), ("false", "OFF"),
                                              ("off", "OFF")])
def test_trace_levels_as_tritonserver_maps_them(given: str, level: str) -> None:
    assert parse("--trace-config", f"level={given}").trace_level == [level]
    assert parse(f"--trace-level={given}").trace_level == [level]


def test_opentelemetry_keys() -> None:
    options = parse("--trace-config", "mode=opentelemetry", "--trace-config", "opentelemetry,url=http://h:1/v1/traces",
                    "--trace-config", "opentelemetry,resource=service.name=x", "--trace-config",
                    "opentelemetry,resource=a=b", "--trace-config", "opentelemetry,bsp_max_queue_size=9",
                    "--trace-config", "opentelemetry,bsp_schedule_delay=10", "--trace-config",
                    "opentelemetry,bsp_max_export_batch_size=4")
    assert options.trace_mode == "opentelemetry"
    assert options.trace_opentelemetry_url == "http://h:1/v1/traces"
    assert options.trace_opentelemetry_resource == ["service.name=x", "a=b"]
    assert (options.trace_opentelemetry_bsp_max_queue_size, options.trace_opentelemetry_bsp_schedule_delay,
            options.trace_opentelemetry_bsp_max_export_batch_size) == (9, 10, 4)


@pytest.mark.parametrize(("item", "text"), [
    ("level=loud", "invalid value for trace level option: loud"),
    (",rate=1", "No trace mode specified"),
    ("rate", "--trace-config option format is '<trace mode>,<setting>=<value>'. Got rate"),
    ("jaeger,url=x", "invalid value for trace mode option: jaeger"),
    ("triton,url=x", "unsupported --trace-config 'triton,url=x'"),
])
def test_malformed_trace_config_is_refused(item: str, text: str) -> None:
    with pytest.raises(SystemExit) as info:
        parse("--trace-config", item)
    assert text in str(info.value)
