"""``workbench tune`` (workbench/tuning/cli.py) on real, tiny runs: an engine in this
process on a temporary copy of ``digits_mlp``, windows of 300 ms, at most three per point.
Numbers that short are noise; what is checked is what the command does with them: the
space it shows, the reports it writes, the exit status, Apply, Ctrl-C and --resume.

Where a test needs a recommendation whatever the machine does, the served config holds a
100 ms queue delay (``max_queue_delay_microseconds: 100000``): at concurrency 1 every request
waits it out, so its p50 is >= 100 ms, and under ``--sla-ms 50 --percentile 50`` only the
delay-0 candidate (~0.3 ms) can meet the SLA; ``--stability-percentage 1000`` makes every
three windows agree.
"""

from __future__ import annotations

import csv
import io
import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from workbench.hosts.cli import main
from workbench.tuning import TuneEvent
from workbench.tuning.progress import ProgressLine
from workbench.tuning.space import parse_space

QUICK = ("--measurement-interval", "300", "--warmup", "100", "--max-windows", "3")
#: the served config's queue delay in the tests that need a recommendation, **µs** (100 ms)
SLOW_DELAY_US = 100_000
RECOMMENDS_DELAY_0 = ("--space", f"max_queue_delay_us={SLOW_DELAY_US},0", "--concurrency", "1",
                      "--sla-ms", "50", "--percentile", "50", "--stability-percentage", "1000")


@pytest.fixture
def repository(tmp_path: Path, sample_repository: Path) -> Path:
    """A repository holding a copy of digits_mlp."""
    shutil.copytree(sample_repository / "digits_mlp", tmp_path / "repo" / "digits_mlp")
    return tmp_path / "repo"


def slow_delay(repository: Path) -> str:
    """Give digits_mlp the 100 ms queue delay; returns the file's text."""
    config = repository / "digits_mlp" / "config.pbtxt"
    text = config.read_text()
    assert "dynamic_batching { }" in text
    config.write_text(text.replace("dynamic_batching { }",
                                   f"dynamic_batching {{ max_queue_delay_microseconds: {SLOW_DELAY_US} }}"))
    return config.read_text()


def tune(capsys: pytest.CaptureFixture[str], repository: Path, *args: str) -> tuple[int, str, str]:
    """``workbench tune -m digits_mlp --model-repository REPO ARGS``: (status, stdout, stderr)."""
    status = main(["tune", "-m", "digits_mlp", "--model-repository", str(repository), *args])
    out, err = capsys.readouterr()
    return status, out, err


def test_show_space_prints_the_space_and_measures_nothing(capsys, repository: Path) -> None:
    status, out, err = tune(capsys, repository, "--show-space")
    assert status == 0 and err == ""
    lines = dict(line.split(":", 1) for line in out.splitlines()[1:4])
    derived = parse_space(lines["space"].strip())  # printed in --space's form
    assert {"instance_count", "max_batch_size", "max_queue_delay_us"} <= set(derived.axes)
    assert 64 in derived.axes["max_batch_size"] and 0 in derived.axes["max_queue_delay_us"]
    assert "instance_count=1 max_batch_size=64" in lines["served"]
    assert lines["load"].strip().startswith("concurrency 1, 2, 4, 8, 16")
    assert "derived from the model and the machine" in out.splitlines()[0]

    status, out, _ = tune(capsys, repository, "--show-space", "--space", "instance_count=1,2", "--concurrency", "1:4")
    assert status == 0
    assert out.splitlines()[1:4] == ["space:  instance_count=1,2", "served: instance_count=1",
                                     "load:   concurrency 1, 2, 4"]
    assert "2 setting(s) x 3 load level(s): brute force measures up to 6 points" in out


def test_a_tiny_run_writes_its_reports(capsys, repository: Path, tmp_path: Path) -> None:
    before = (repository / "digits_mlp" / "config.pbtxt").read_bytes()
    paths = {kind: tmp_path / f"out.{kind}" for kind in ("json", "csv", "html")}
    status, out, err = tune(capsys, repository, "--space", "instance_count=1,2", "--concurrency", "1,2",
                            "--stability-percentage", "50", *QUICK,
                            *(a for kind, path in paths.items() for a in (f"--{kind}", str(path))))
    report = json.loads(paths["json"].read_text())
    with paths["csv"].open(newline="") as file:
        rows = list(csv.DictReader(file))
    page = paths["html"].read_text()
    # 0 with a recommendation (or the served config kept), 1 when nothing could be
    assert status == (0 if report["chosen"] is not None else 1), out
    assert out.startswith("digits_mlp on in-process engine: quick search, ")
    assert ("RECOMMENDED: " if report["apply"] else "result: ") + report["why"] in out
    assert report["target"] == "in-process engine" and report["space"]["axes"] == {"instance_count": [1, 2]}
    labels = [(p["label"], p["level"]["value"]) for p in report["points"]]
    assert labels[0] == ("instance_count=1", 1)  # the served config first
    assert set(labels) <= {(f"instance_count={n}", c) for n in (1, 2) for c in (1, 2)}
    assert [(r["setting"], float(r["level"])) for r in rows] == labels
    assert all(int(r["p50_us"]) <= int(r["p99_us"]) and float(r["throughput_infer_per_s"]) > 0 for r in rows)
    assert page.startswith("<!doctype html>") and "<svg" in page and "p99 latency (ms)" in page
    assert page.count("<tr") == len(labels) + 1  # the header and one row per point
    assert err.count("] point: ") == len(labels) and err.count("] window: ") == report["windows"]
    assert (repository / "digits_mlp" / "config.pbtxt").read_bytes() == before  # nothing written
    assert not (repository / "digits_mlp" / "config.pbtxt.bak").exists()


def test_apply_writes_the_recommendation_keeping_comments(capsys, repository: Path) -> None:
    original = slow_delay(repository)
    status, out, _ = tune(capsys, repository, *RECOMMENDS_DELAY_0, *QUICK, "--apply")
    assert status == 0, out
    assert "RECOMMENDED: max_queue_delay_us=0 at " in out
    config = repository / "digits_mlp" / "config.pbtxt"
    assert f"digits_mlp: wrote {config} (the previous file kept as {config}.bak); reloaded" in out
    written = config.read_text()
    assert written == original.replace(f"max_queue_delay_microseconds: {SLOW_DELAY_US}",
                                       "max_queue_delay_microseconds: 0")  # that value only: comments kept
    assert "# a 64->hidden->10 MLP gains nothing" in written
    assert (repository / "digits_mlp" / "config.pbtxt.bak").read_text() == original


@pytest.mark.parametrize(("args", "message"), [
    ((), "needs --model-repository"),
    (("-u", "localhost:8001", "--apply"), "put it in the server's model repository"),
    (("--model-repository", "x", "--space", "instance_count=0"), "instance_count must be >= 1"),
    (("--model-repository", "x", "--concurrency", "1", "--request-rate", "5"), "not allowed with argument"),
    (("--model-repository", "x", "--objective", "cost"), "invalid choice: 'cost'"),
])
def test_usage_errors_exit_2(capsys, args: tuple[str, ...], message: str) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["tune", "-m", "digits_mlp", *args])
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_ctrl_c_stops_cleanly_and_resume_measures_only_the_missing_points(capsys, repository: Path,
                                                                           tmp_path: Path) -> None:
    """Ctrl-C on a subprocess after its first point: status 130, the partial result printed
    and exported, the point saved; run again with the same --resume file, that point is read,
    not measured. Windows that must agree within 0.01 % never do: the second run ends with
    every point unstable, status 1."""
    state, first = tmp_path / "state.json", tmp_path / "first.json"
    before = (repository / "digits_mlp" / "config.pbtxt").read_bytes()
    common = ["--strategy", "brute", "--space", "instance_count=1,2", "--concurrency", "1,2",
              "--stability-percentage", "0.01", *QUICK, "--resume", str(state)]
    command = [sys.executable, "-m", "workbench.hosts.cli", "tune", "-m", "digits_mlp",
               "--model-repository", str(repository), *common, "--json", str(first)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stderr is not None
    seen = []
    for line in process.stderr:  # the first point measured (and saved), then Ctrl-C
        seen.append(line)
        if "] point: " in line:
            process.send_signal(signal.SIGINT)
            break
    out, err = process.communicate(timeout=120)
    err = "".join(seen) + err
    assert process.returncode == 130, err
    assert "Traceback" not in err and "stopping (Ctrl-C)" in err
    assert "(stopped)" in out.splitlines()[0]
    saved = json.loads(state.read_text())["points"]
    report = json.loads(first.read_text())
    assert report["stopped"] and [p["label"] for p in report["points"]] == [p["label"] for p in saved]
    assert len(saved) < 4  # stopped before the end (brute force: 2 settings x 2 levels)
    assert (repository / "digits_mlp" / "config.pbtxt").read_bytes() == before

    second = tmp_path / "second.json"
    status, out, err = tune(capsys, repository, *common, "--max-points", "1", "--json", str(second))
    report = json.loads(second.read_text())
    resumed = [(p["label"], p["level"]["value"]) for p in report["points"] if p["from_resume"]]
    assert resumed == [(p["label"], p["level"]["value"]) for p in saved]  # not measured again
    assert report["measurements"] == 1 and len(report["points"]) == len(saved) + 1
    assert err.count("] window: ") == report["windows"] == len(report["points"][-1]["window_results"])
    # windows that never agree within 0.01 %: every point unstable, nothing recommended, status 1
    assert status == 1 and not any(p["stable"] for p in report["points"])
    assert "result: every measurement was unstable" in out and "nothing is recommended" in out


def test_progress_rewrites_one_line_on_a_terminal_and_writes_lines_elsewhere() -> None:
    events = [TuneEvent("load", "loading instance_count=2", 1, 4),
              TuneEvent("window", "instance_count=2 at c=1: window 1", 1, 4),
              TuneEvent("point", "instance_count=2 at c=1: 812.0 infer/s", 2, 4)]
    terminal, log = io.StringIO(), io.StringIO()
    on_terminal, in_a_log = ProgressLine(terminal, tty=True), ProgressLine(log, tty=False)
    for event in events:
        on_terminal(event)
        in_a_log(event)
    on_terminal(TuneEvent("window", "instance_count=1 at c=2: window 1", 2, 4))
    on_terminal.close()
    # the status line is rewritten in place; a finished point stays as a line of its own
    assert terminal.getvalue().count("\r\x1b[K") == 5
    kept = terminal.getvalue().split("\n")
    assert len(kept) == 2 and kept[0].endswith("point: instance_count=2 at c=1: 812.0 infer/s")
    assert "\r" not in log.getvalue()
    assert [line.split("] ", 1)[1] for line in log.getvalue().splitlines()] == [
        "load: loading instance_count=2", "window: instance_count=2 at c=1: window 1",
        "point: instance_count=2 at c=1: 812.0 infer/s"]
    assert log.getvalue().startswith("tune [1/4 points, ")
