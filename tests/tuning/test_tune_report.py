"""The notebook front: ``await tune(server, model, sla_ms=...)`` returns a result that a
notebook cell renders as the report (``_repr_html_``: the inline-SVG Pareto plot, the
reasoning, the table, the config to keep), with a progress bar while it runs.

A real run, made to recommend whatever the machine does: the served config waits 100 ms
for a batch (``max_queue_delay_microseconds: 100000``), so at concurrency 1 its p50 is over
100 ms and only the delay-0 candidate meets a 50 ms p50 SLA; a 1000 % tolerance makes every
three windows agree.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest
from IPython.core.formatters import format_display_data

from workbench import Server, ServerOptions
from workbench.tuning import tune


async def test_the_result_renders_as_the_report(tmp_path: Path, sample_repository: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copytree(sample_repository / "digits_mlp", tmp_path / "digits_mlp")
    config = tmp_path / "digits_mlp" / "config.pbtxt"
    config.write_text(config.read_text().replace("dynamic_batching { }",
                                                 "dynamic_batching { max_queue_delay_microseconds: 100000 }"))
    options = ServerOptions(model_repository=[str(tmp_path)], model_control_mode="explicit",
                            load_model=["digits_mlp"])
    async with Server(options) as server:
        result = await tune(server, "digits_mlp", sla_ms=50, percentile=50, levels="1",
                            space="max_queue_delay_us=100000,0", stability_percentage=1000,
                            measurement_interval_ms=300, warmup_ms=100, max_windows=3)
    out, err = capsys.readouterr()
    shown, _ = format_display_data(result)  # what a notebook cell does with a result
    page = shown["text/html"]
    assert result.decision.apply, result.decision.why
    # the reasoning first
    assert page.startswith("<p><b>Recommended:</b> max_queue_delay_us=0 at ")
    assert "The served config has no stable point meeting the goals." in page
    # the Pareto plot: every point, the SLA, the chosen one starred
    plot = page[page.index("<svg"):page.index("</svg>")]
    assert plot.count("<circle") == len(result.points) == 2
    assert "SLA 50 ms" in plot and "p50 latency (ms)" in plot
    assert "★<title>chosen: max_queue_delay_us=0</title>" in plot
    # the table: one row per point, the chosen one highlighted, why the other fails
    table = page[page.index("<table>"):page.index("</table>")]
    assert table.count("<tr") == 3 and "<th>p50_us</th>" in table
    chosen = next(row for row in table.split("<tr")[1:] if "font-weight:bold" in row)
    assert "<td>max_queue_delay_us=0</td>" in chosen
    assert "&gt; SLA 50 ms" in table  # the served config's p50 (escaped '>')
    # the file to keep: comments and all, the one value changed
    assert "config.pbtxt with the chosen knobs" in page
    assert "max_queue_delay_microseconds: 0" in page and "# a 64-&gt;hidden-&gt;10 MLP" in page
    # the progress bar (tqdm when installed: a widget in a notebook, stderr here)
    if importlib.util.find_spec("tqdm") is not None:
        assert "tuning" in err and "point" in err
    else:
        assert "max_queue_delay_us=0 at " in out
