"""Notebook 03's Bokeh plot renders in JupyterLab with every request to another server (a
CDN) refused, as offline (issue 35): its ``output_notebook`` ships BokehJS in the notebook
(``INLINE``). The plot's cell is the committed notebook's own, after a cell standing in for
the measurements it plots."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import nbformat
import pytest

from tests.browser.browser_support import Dashboard, kernel_lab, run_all_cells_until, serving

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "03_ensemble_pipeline.ipynb"
#: what the plot's cell reads from the cells before it in notebook 03
MEASURED = ('order = ["tokenizer", "encoder"]\nCONCURRENCY = 4\n'
            'steps = {"tokenizer": {"queue_us": 300, "compute_us": 900},\n'
            '         "encoder": {"queue_us": 1200, "compute_us": 5100}}')


@pytest.fixture(scope="module")
def plain_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dashboard]:
    """`jupyter lab` without the workbench extensions (the plot needs neither)."""
    if importlib.util.find_spec("jupyterlab") is None:
        pytest.skip("jupyterlab is not installed (the `dev` extra has it)")
    with serving(kernel_lab(tmp_path_factory.mktemp("lab-home"))) as served:
        yield served


def plot_cell() -> str:
    """Notebook 03's cell that calls ``output_notebook`` and shows the plot."""
    cells = nbformat.read(NOTEBOOK, as_version=4).cells
    return next(c.source for c in cells if c.cell_type == "code" and "output_notebook" in c.source)


def test_notebook_03s_plot_renders_with_cdns_blocked(browser, plain_lab: Dashboard, shots: Path) -> None:
    lab = plain_lab
    notebook = nbformat.v4.new_notebook()
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    notebook.cells = [nbformat.v4.new_code_cell(MEASURED), nbformat.v4.new_code_cell(plot_cell())]
    nbformat.write(notebook, Path(lab.jupyter.root_dir) / "offline_plot.ipynb")
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    here = urlsplit(lab.root).netloc

    def offline(route) -> None:
        if urlsplit(route.request.url).netloc in ("", here):
            route.continue_()
        else:
            route.abort("internetdisconnected")

    page.route("**/*", offline)
    page.goto(f"{lab.root}lab/tree/offline_plot.ipynb?token={lab.jupyter.token}")
    plot = page.locator(".jp-OutputArea canvas")
    try:
        run_all_cells_until(page, lambda: plot.first.is_visible(), "notebook 03's plot drawn")
    finally:
        page.screenshot(path=shots / "offline-plot.png")
    box = plot.first.bounding_box()
    assert box is not None and box["width"] > 300, box
    page.close()
