"""The dashboard attached to a Ray cluster's ingress in a real browser (issue 37): a head and
two worker nodes, ``workbench ray-serve`` with two replicas (one per worker node). Typed as a
person would, the one ingress URL; the Live tab then sums the replicas and overlays each one,
named ``host:port replica <id>`` (read through the ingress's ``GET /v2/cluster/replicas``:
one ``GET /v2/models/stats`` through Serve would reach one replica at random).

In the production tier (a Ray cluster takes minutes to start on 2 cores). Ports: Serve's
proxies 19902 (HTTP) / 19903 (gRPC); Ray's 20200-20229, workers 20230-20299.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

pytest.importorskip("ray", reason="the ray extra (make test-production installs it)")

from tests.browser.browser_support import FIND_JS, PATIENCE_S, Dashboard
from workbench.testing.process import RayServeProcess
from workbench.testing.ray_cluster import RayPorts, ray_serve_cluster
from workbench.testing.reload import write_add_sub

pytestmark = pytest.mark.production

HTTP, GRPC = 19902, 19903
URL = f"http://127.0.0.1:{HTTP}"
WAIT_MS = PATIENCE_S * 1000
#: the replicas overlay's legend entries shown, and how many have throughput
LEGEND_JS = f"({FIND_JS})('live_versions_throughput_legend').items.filter(i => i.visible)"
BOTH_BUSY_JS = f"""() => {{
  const shown = {LEGEND_JS};
  const busy = shown.filter(i => Math.max(0, ...Array.from(i.renderers[0].data_source.data.y)) > 0).length;
  return shown.length === 2 && busy === 2;
}}"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayServeProcess]:
    repo = tmp_path_factory.mktemp("ray-attach") / "models"
    write_add_sub(repo, instances=1)
    root = str(Path(__file__).resolve().parents[2])
    with ray_serve_cluster(RayPorts(20200, (20230, 20299)), 2,
                           [f"--http-port={HTTP}", f"--grpc-port={GRPC}", f"--model-repository={repo}",
                            "--min-replicas=2", "--replica-cpus=1"], root) as serve:
        yield serve


class Traffic:
    """add_sub requests through the ingress from a thread (Serve spreads them on the replicas)."""

    def __init__(self) -> None:
        self.sent = 0
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(4)]

    def _run(self) -> None:
        body = {"inputs": [{"name": n, "shape": [1, 16], "datatype": "FP32", "data": [1.0] * 16}
                           for n in ("INPUT0", "INPUT1")]}
        with httpx.Client(base_url=URL, timeout=60) as client:
            while not self._stop.is_set():
                assert client.post("/v2/models/add_sub/infer", json=body).status_code == 200
                self.sent += 1

    def __enter__(self) -> Traffic:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)


def test_hosted_dashboard_shows_each_replica_of_the_cluster(
        browser, dashboard: Dashboard, cluster: RayServeProcess, shots: Path) -> None:
    ids = [row["replica"] for row in httpx.get(f"{URL}/v2/cluster/replicas", timeout=60).json()["replicas"]]
    assert len(ids) == 2, ids
    page = browser.new_page(viewport={"width": 1400, "height": 1600})
    page.goto(dashboard.page_url)
    page.locator(".tabulator-cell", has_text="digits_mlp").first.wait_for(timeout=WAIT_MS)
    page.get_by_label("Attach to a server").first.fill(URL)
    page.get_by_role("button", name="Attach").first.click()
    page.get_by_text(f"Attached to {URL}").first.wait_for(timeout=WAIT_MS)
    page.locator(".tabulator-cell", has_text="onnxruntime").first.wait_for(timeout=WAIT_MS)
    page.locator(".bk-tab", has_text="Live").first.click()
    page.get_by_label("Model version").first.select_option("add_sub/1")
    page.get_by_text("the sum of 2 replicas").first.wait_for(timeout=WAIT_MS)
    with Traffic() as traffic:
        page.wait_for_function(BOTH_BUSY_JS, timeout=WAIT_MS)
        page.wait_for_function(
            f"() => Math.max(0, ...({FIND_JS})('live_series').data.inferences_per_s) > 0", timeout=WAIT_MS)
        page.screenshot(path=shots / "ray-replicas-live.png", full_page=True)
    assert traffic.sent > 0
    labels = page.evaluate(f"() => {LEGEND_JS}.map(i => i.label.value)")
    assert sorted(labels) == sorted(f"127.0.0.1:{HTTP} replica {replica}" for replica in ids)
    title = page.evaluate(f"() => ({FIND_JS})('live_versions_throughput').title.text")
    assert title == "Replicas: throughput"
    page.close()
