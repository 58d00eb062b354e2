"""``import workbench.ui`` (and its live statistics) must not import Panel, Bokeh or ipywidgets."""

from __future__ import annotations

import subprocess
import sys


def test_ui_package_and_live_stats_import_no_dashboard_library() -> None:
    code = ("import sys, workbench.ui, workbench.serving.live_stats, workbench.ui.shared.store, "
            "workbench.config_edits.knobs, workbench.config_edits.overrides, workbench.ui.headless.serve_process; "
            "print(sorted(m for m in ('panel', 'bokeh', 'ipywidgets', 'pandas') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_entry_points_import_panel_on_first_use() -> None:
    code = ("import sys, workbench.ui as ui; f = ui.dashboard; "
            "print(f.__module__, 'panel' in sys.modules, callable(ui.create_app))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["workbench.ui.app", "True", "True"]
