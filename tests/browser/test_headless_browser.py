"""The Headless tab in a real browser, on the Jupyter-hosted dashboard: Start shows the process
READY with its log following the newest line, Stop shows its exit status, and Write shows what
was written, the Python-backend models' packages and import warnings, errors as sentences (no
Python exception names) that the next action clears, and a disabled button when there is no
folder (issue 16, items 7, 10, 11)."""

from __future__ import annotations

import contextlib
import re
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.browser.browser_support import PATIENCE_S, run_all_cells_until, write_dashboard_notebook
from workbench.testing.process import free_ports
from workbench.testing.reload import write_add_sub
from workbench.ui.serve_process import DEFAULT_PORTS

WAIT_MS = PATIENCE_S * 1000
#: the log box of the Headless tab (its css class, workbench.ui.headless_view)
LOG_BOX = ".workbench-headless-log"
#: add_sub copies in the served repository: one "successfully loaded" line each, more lines
#: than the log box shows at once
MODELS = 30


def open_headless(browser, dashboard):
    page = browser.new_page(viewport={"width": 1400, "height": 1100})
    page.goto(dashboard.page_url)
    page.wait_for_function("() => window.Bokeh !== undefined && Bokeh.documents.length > 0",
                           timeout=WAIT_MS)
    page.locator(".bk-tab", has_text="Headless").click()
    page.get_by_role("button", name="Start workbench serve").wait_for(timeout=WAIT_MS)
    return page


def fill(page, label: str, value: object) -> None:
    field = page.get_by_label(label, exact=True)
    field.fill(str(value))
    field.press("Enter")


def shows(page, pattern: str) -> None:
    page.get_by_text(re.compile(pattern)).first.wait_for(timeout=WAIT_MS)


def test_start_stop_and_deploy_show_on_the_page(browser, dashboard, tmp_path: Path, shots: Path) -> None:
    many = tmp_path / "many"
    for n in range(MODELS):
        write_add_sub(many, name=f"adder_{n:02d}", instances=1)
    python_repo = tmp_path / "python_models"
    (python_repo / "custom" / "1").mkdir(parents=True)
    (python_repo / "custom" / "config.pbtxt").write_text('name: "custom"\nbackend: "python"\n')
    (python_repo / "custom" / "1" / "model.py").write_text(
        "import yaml\n\n\ndef initialize(args):\n    import no_such_package_here\n")

    page = open_headless(browser, dashboard)
    from playwright.sync_api import expect

    # the deployment folder shown is a real absolute folder, not a placeholder
    folder = page.get_by_label("Deployment folder", exact=True)
    assert Path(folder.input_value()).is_absolute()
    page.screenshot(path=shots / "1-headless.png", full_page=True)

    # Start: READY on the page, the log box scrolled to its newest line
    fill(page, "Model repository", many)
    http, grpc, metrics = free_ports(3)
    fill(page, "HTTP port", http)
    fill(page, "gRPC port", grpc)
    fill(page, "metrics port", metrics)
    page.get_by_role("button", name="Start workbench serve").click()
    shows(page, rf"READY: pid \d+, HTTP 127\.0\.0\.1:{http}")
    box = page.locator(LOG_BOX)
    expect(box).to_contain_text(f"Started HTTPService at 127.0.0.1:{http}", timeout=WAIT_MS)
    expect(box).to_contain_text(f"'adder_{MODELS - 1:02d}'")
    page.wait_for_function(
        "el => el.scrollHeight > el.clientHeight + 50"
        " && el.scrollHeight - el.scrollTop - el.clientHeight < 5",
        arg=box.element_handle(), timeout=WAIT_MS)  # overflowing, and showing its end
    expect(page.get_by_role("button", name="Start workbench serve")).to_be_disabled()
    page.screenshot(path=shots / "2-started.png", full_page=True)

    # Stop: the exit status
    page.get_by_role("button", name="Stop", exact=True).click()
    shows(page, r"EXITED \(0\): pid \d+")
    expect(page.get_by_role("button", name="Start workbench serve")).to_be_enabled()
    expect(page.get_by_role("button", name="Stop", exact=True)).to_be_disabled()
    page.screenshot(path=shots / "3-stopped.png", full_page=True)

    # Deploy a Python-backend repository: what was written, its packages, the import warning
    out = tmp_path / "deploy"
    fill(page, "Model repository", python_repo)
    fill(page, "Deployment folder", out)
    page.get_by_role("button", name="Write Dockerfile + manifests").click()
    shows(page, r"Written into")
    expect(page.get_by_text("requirements-models.txt").first).to_be_visible()
    shows(page, r"pyyaml==")
    shows(page, r"Check before building")
    shows(page, r"no_such_package_here")
    assert "pyyaml==" in (out / "requirements-models.txt").read_text()
    assert (out / "Dockerfile").is_file() and (out / "models" / "custom" / "1" / "model.py").is_file()
    page.screenshot(path=shots / "4-deployed.png", full_page=True)

    # a folder inside the repository: a sentence, no exception name; the list above is gone
    fill(page, "Deployment folder", python_repo / "inside")
    page.get_by_role("button", name="Write Dockerfile + manifests").click()
    shows(page, r"not written: the output folder .* must not be inside the model repository")
    expect(page.get_by_text("Written into")).to_have_count(0)
    expect(page.get_by_text("Check before building")).to_be_hidden()
    expect(page.get_by_text(re.compile(r"[A-Za-z]+(Error|Exception)\b"))).to_have_count(0)
    page.screenshot(path=shots / "5-deploy-error.png", full_page=True)

    # no folder: the button cannot be clicked
    folder.fill("")
    folder.press("Enter")
    expect(page.get_by_role("button", name="Write Dockerfile + manifests")).to_be_disabled()
    page.screenshot(path=shots / "6-no-folder.png", full_page=True)
    page.close()


@contextlib.contextmanager
def tritons_ports_held() -> Iterator[None]:
    """Triton's 8000-8002 held by another listener, on ``[::1]`` only (as a server bound to
    ``localhost`` may: an IPv4-only probe took them for free); skips where it cannot."""
    held: list[socket.socket] = []
    try:
        for port in DEFAULT_PORTS:
            holder = socket.socket(socket.AF_INET6)
            held.append(holder)
            try:
                holder.bind(("::1", port))
                holder.listen()
            except OSError as exc:
                pytest.skip(f"cannot hold [::1]:{port} here: {exc}")
        yield
    finally:
        for holder in held:
            holder.close()


def proposes_free_ports(scope) -> None:
    """The Headless tab's form proposes no port of Triton's trio and says they were taken."""
    from playwright.sync_api import expect

    proposed = [int(scope.get_by_label(label, exact=True).filter(visible=True).first.input_value())
                for label in ("HTTP port", "gRPC port", "metrics port")]
    assert not set(proposed) & set(DEFAULT_PORTS), proposed
    note = scope.locator(".workbench-ports-note").filter(visible=True).first
    expect(note).to_contain_text("Taken: 8000, 8001, 8002", timeout=WAIT_MS)
    expect(note).to_contain_text(f"proposing {proposed[0]}, {proposed[1]} and {proposed[2]}")


def test_the_form_proposes_free_ports_and_says_which_were_taken(browser, dashboard, shots: Path) -> None:
    """Another server holds Triton's 8000-8002: the Jupyter-hosted dashboard's form proposes
    a free trio and says which ports were taken."""
    with tritons_ports_held():
        page = open_headless(browser, dashboard)
        proposes_free_ports(page)
        page.screenshot(path=shots / "headless-ports.png", full_page=True)
        page.close()


def test_the_inline_form_proposes_free_ports_and_says_which_were_taken(browser, lab, models: Path) -> None:
    """The same in the inline notebook dashboard (a kernel's engine, serving no v2 ports)."""
    with tritons_ports_held():
        write_dashboard_notebook(Path(lab.jupyter.root_dir) / "headless.ipynb", models)
        page = browser.new_page(viewport={"width": 1400, "height": 1100})
        try:
            page.goto(f"{lab.root}lab/tree/headless.ipynb?token={lab.jupyter.token}")
            output = page.locator(".jp-OutputArea")
            headless = output.locator(".bk-tab", has_text="Headless").first
            run_all_cells_until(page, headless.is_visible, "the inline dashboard's tabs")
            headless.click()
            proposes_free_ports(output)
        finally:
            page.close()
            with httpx.Client(base_url=lab.root, headers=lab.jupyter.headers, timeout=60) as jupyter:
                for session in jupyter.get("api/sessions").json():
                    jupyter.delete(f"api/sessions/{session['id']}").raise_for_status()
