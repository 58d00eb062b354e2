"""``workbench serve``'s flags come from one declaration, :class:`ServerOptions`: every field is a
flag (or names the tritonserver flag that fills it), with tritonserver's spellings, the field's
docstring as help, and docs/serve.md lists them all."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from workbench import ServerOptions
from workbench.hosts.cli import build_parser, main, options_from_args
from workbench.hosts.server_flags import COMPOSITE_FLAGS, field_flags, flag_names

SERVE_DOC = Path(__file__).resolve().parents[2] / "docs" / "serve.md"


def _serve_parser():
    commands = next(a for a in build_parser()._actions if a.dest == "command")
    assert isinstance(commands.choices, dict)  # a subparsers action: command name -> parser
    return commands.choices["serve"]


def _serve_flags() -> dict[str, list[str]]:
    """``{primary flag: every spelling}`` of ``workbench serve``."""
    return {a.option_strings[0]: a.option_strings for a in _serve_parser()._actions
            if a.option_strings and a.dest != "help"}


def _options(*flags: str) -> ServerOptions:
    return options_from_args(build_parser().parse_args(["serve", "--model-repository=r", *flags]))


def test_every_field_is_a_flag_or_names_the_flag_that_fills_it() -> None:
    flags = _serve_flags()
    composite = {c.name for c in COMPOSITE_FLAGS}
    for name, flag, _field in field_flags():
        if flag.via:
            assert flag.via in composite, f"{name}: via {flag.via} is no composite flag"
        else:
            assert flag_names(name, flag)[0] in flags, name
    own = {flag_names(n, f)[0] for n, f, _ in field_flags() if not f.via}
    assert set(flags) == own | composite


def test_tritonserver_spellings_and_aliases() -> None:
    assert _serve_flags()["--model-repository"] == ["--model-repository", "--model-store"]
    assert _serve_flags()["--rate-limit"] == ["--rate-limit", "--rate-limiter"]
    options = _options("--model-store=s", "--id=edge", "--rate-limiter=execution_count",
                       "--rate-limiter-resource=R:2")
    assert options.model_repository == ["r", "s"] and options.server_id == "edge"
    assert (options.rate_limit, options.rate_limit_resource) == ("execution_count", ["R:2"])


@pytest.mark.parametrize(("spelling", "value"), [
    ([], False), (["--allow-client-shm"], True), (["--allow-client-shm=true"], True),
    (["--allow-client-shm=false"], False), (["--allow-client-shm=ON"], True),
    (["--allow-client-shm", "0"], False)])
def test_boolean_flags_take_tritonserver_spellings(spelling: list[str], value: bool) -> None:
    assert _options(*spelling).allow_client_shm is value


def test_bad_values_exit_2_with_the_flag_named(capsys) -> None:
    for flag, text in [("--exit-on-error=maybe", "argument --exit-on-error: expected true or false, got 'maybe'"),
                       ("--grpc-port=70000", "argument --grpc-port: port must be in 0..65535, got 70000"),
                       ("--model-control-mode=auto", "argument --model-control-mode: invalid choice: 'auto'")]:
        with pytest.raises(SystemExit) as info:
            build_parser().parse_args(["serve", "--model-repository=r", flag])
        assert info.value.code == 2 and text in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:  # pydantic's range check, through parser.error
        main(["serve", "--model-repository=r", "--model-load-thread-count=0"])
    assert info.value.code == 2 and "model_load_thread_count" in capsys.readouterr().err


def test_composite_flags_fill_their_fields() -> None:
    options = _options("--trace-config=triton,file=/t.json", "--trace-config=level=TIMESTAMPS",
                       "--backend-config=default-max-batch-size=2", "--cache-config=local,size=64",
                       "--strict-model-config=false", "--disable-auto-complete-config")
    assert (options.trace_file, options.trace_level) == ("/t.json", ["TIMESTAMPS"])
    assert (options.default_max_batch_size, options.response_cache_byte_size) == (2, 64)
    assert options.strict_model_config is True  # --disable-auto-complete-config wins, as before


@pytest.mark.parametrize(
    ("flags", "text"),
    [
        (["--response-cache-byte-size=12345", "--cache-config=local,size=67890"], "Incompatible flags "
         "--response-cache-byte-size and --cache-config both provided. Please provide one or the other."),
        (["--cache-config=local,size=8192", "--cache-config=redis,key=value"],
         "found multiple cache configurations, but only a single cache is currently supported"),
        (["--cache-config=size=8192"], "No cache specified. --cache-config option format is "
         "<cache name>,<setting>=<value>. Got size=8192"),
        (["--cache-config=local,size"], "--cache-config option format is '<cache name>,<setting>=<value>'. "
         "Got local,size"),
        (["--cache-config=local,type=lru"], "Failed to initialize LocalCache: config didn't contain a valid "
         "'size' field."),
    ],
    ids=["both-styles", "two-caches", "no-cache-name", "no-value", "no-size"],
)
def test_cache_flags_are_checked_as_tritonserver_does(flags: list[str], text: str) -> None:
    with pytest.raises(SystemExit) as info:
        _options(*flags)
    assert text in str(info.value.code)


def test_cache_config_entries_of_one_cache_combine() -> None:
    """Several ``--cache-config`` items of the ``local`` cache are one cache's settings."""
    assert _options("--cache-config=local,size=4096", "--cache-config=local,other=x").response_cache_byte_size == 4096
    assert _options("--response-cache-byte-size=8").response_cache_byte_size == 8


def test_flags_left_out_keep_the_environment(monkeypatch) -> None:
    monkeypatch.setenv("WORKBENCH_HTTP_PORT", "9100")
    monkeypatch.setenv("WORKBENCH_LOG_VERBOSE", "2")
    assert (_options().http_port, _options().log_verbose) == (9100, 2)
    assert _options("--http-port=9200").http_port == 9200
    monkeypatch.delenv("WORKBENCH_HTTP_PORT")
    assert _options().http_port == ServerOptions.model_fields["http_port"].default == 8000


def test_help_is_the_field_docstring_with_its_default() -> None:
    out = subprocess.run([sys.executable, "-m", "workbench.hosts.cli", "serve", "--help"],
                         capture_output=True, text=True, check=True).stdout
    flat = " ".join(out.split())
    assert "Seconds between two rescans in 'poll' mode" in flat  # --repository-poll-secs
    assert "Address the HTTP service binds ('--http-address'). (default 0.0.0.0)" in flat
    assert "--cache-config local,size=N" in flat and "--trace-config [MODE,]KEY=VALUE" in flat


def test_serve_doc_lists_every_serve_flag() -> None:
    text = SERVE_DOC.read_text()
    usage = re.search(r"^workbench serve --model-repository.*?```", text, re.DOTALL | re.MULTILINE)
    assert usage is not None, "docs/serve.md has no `workbench serve` usage block"
    listed = set(re.findall(r"--[a-z0-9-]+", usage.group(0)))
    flags = _serve_flags()
    assert sorted(set(flags) - listed) == []
    aliases = {alias for spellings in flags.values() for alias in spellings[1:]}
    assert sorted(a for a in aliases if f"`{a}`" not in text and a not in listed) == []


SECURITY_DOC = SERVE_DOC.parent / "security.md"


def test_security_doc_gives_every_limit_flag_its_default() -> None:
    """docs/security.md's limits table has a row for every size, count, rate and time limit
    (the flags named ``--*max*``, ``--*timeout*``, ``--*min-rate*``; gRPC keepalive and HTTP/2
    ping settings are not limits) with the ServerOptions default."""
    row = re.compile(r"^\|[^|]*\| `(--[a-z0-9-]+)` \| `([^`]*)`", re.MULTILINE)
    rows = dict(row.findall(SECURITY_DOC.read_text()))
    limits = {}
    for name, flag, field in field_flags():
        spelling = flag_names(name, flag)[0]
        if not flag.via and re.search(r"max|timeout|min-rate", spelling) and \
                not re.match(r"--grpc-(keepalive|http2)", spelling):
            limits[spelling] = f"{field.default:g}" if isinstance(field.default, float) else str(field.default)
    assert len(limits) >= 17
    assert {flag: rows.get(flag) for flag in limits} == limits
