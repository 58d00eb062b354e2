"""The alert rules and the Grafana dashboard of `workbench deploy` against live data: a real
Prometheus (Debian's ``prometheus``, unprivileged, storage in a temporary folder, scraping
every second) scrapes two real `workbench serve` processes under load, and

- each alert's expression, asked through Prometheus' HTTP query API, is empty before its
  event and true during or after it (errors sent -> error rate; a burst on a slow model ->
  pending growing and queue time; any load -> p99 above a 1 µs SLA, not above a 100 s one;
  a model unloaded -> not ready; the repository folder gone -> poll failures; a server
  stopped -> server down), and Prometheus' own rule evaluation saw it (``ALERTS`` series,
  pending or firing);
- every panel query of the dashboard (variables substituted) returns data, except the GPU
  panels without a GPU (skipped, with the reason).

Ports: the servers 8500-8505, Prometheus 9390. About 40-60 s on this machine.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import httpx
import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from workbench.deploy import alerts, grafana, yaml_text
from workbench.deploy.spec import DeploySpec
from workbench.testing.models import ADD_SUB_CONFIG, add_sub_graph, write_model
from workbench.testing.process import ServerProcess

pytestmark = pytest.mark.e2e
T = TypeVar("T")

PROMETHEUS = shutil.which("prometheus")
PROMETHEUS_PORT = 9390
EXPLICIT_PORTS = (8500, 8501, 8502)  # http, grpc, metrics of the explicit-mode server
POLL_PORTS = (8503, 8504, 8505)  # of the poll-mode server
JOB = "workbench"
#: thresholds that the test's events cross
TIGHT = DeploySpec(name=JOB, alert_error_rate=0.05, alert_p99_latency_us=1, alert_queue_time_us=1000,
                   alert_pending_requests=10)
#: thresholds that nothing here comes near (the expressions must stay empty)
LOOSE = DeploySpec(name=JOB, alert_p99_latency_us=100_000_000, alert_queue_time_us=100_000_000,
                   alert_pending_requests=100_000, alert_error_rate=0.9)
SLEEPER = Path(__file__).parents[2] / "workbench" / "testing" / "python_models" / "sleeper"
#: requests of the burst on the slow model (2 per execution of 300 ms: ~10 s to drain)
BURST = 64


class Prometheus:
    """Debian's prometheus on :data:`PROMETHEUS_PORT`, scraping ``targets`` every second,
    evaluating ``rules`` every second; storage under ``folder``."""

    def __init__(self, folder: Path, targets: list[str], rules: dict) -> None:
        assert PROMETHEUS is not None
        (folder / "rules.yml").write_text(yaml_text.dump(rules))
        (folder / "prometheus.yml").write_text(yaml_text.dump({
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "900ms"},
            "rule_files": ["rules.yml"],
            "scrape_configs": [{"job_name": JOB, "static_configs": [{"targets": targets}]}],
        }))
        self.url = f"http://127.0.0.1:{PROMETHEUS_PORT}"
        self.log = folder / "prometheus.log"
        with self.log.open("w") as log:
            self.process = subprocess.Popen(
                [PROMETHEUS, f"--config.file={folder / 'prometheus.yml'}",
                 f"--storage.tsdb.path={folder / 'data'}",
                 f"--web.listen-address=127.0.0.1:{PROMETHEUS_PORT}", "--log.level=warn"],
                stdout=subprocess.DEVNULL, stderr=log)
        self.http = httpx.Client(base_url=self.url, timeout=10)
        try:
            wait_until(lambda: self._ready(), 30, "prometheus ready")
        except BaseException:
            self.stop()
            raise

    def _ready(self) -> bool:
        if self.process.poll() is not None:
            raise RuntimeError("prometheus exited:\n" + self.log.read_text())
        try:
            return self.http.get("/-/ready").status_code == 200
        except httpx.TransportError:
            return False

    def query(self, expr: str) -> list[dict]:
        """The instant vector of ``expr`` now (``/api/v1/query``)."""
        answer = self.http.get("/api/v1/query", params={"query": expr}).json()
        assert answer["status"] == "success", (expr, answer)
        return answer["data"]["result"]

    def query_range(self, expr: str, start: float) -> list[dict]:
        """The series of ``expr`` from ``start`` to now, one point a second (a comparison's
        false points are dropped: non-empty = true at some point)."""
        answer = self.http.get("/api/v1/query_range", params={
            "query": expr, "start": start, "end": time.time(), "step": "1s"}).json()
        assert answer["status"] == "success", (expr, answer)
        return answer["data"]["result"]

    def stop(self) -> None:
        self.http.close()
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def wait_until(condition: Callable[[], T], timeout_s: float, what: str) -> T:
    """Ask ``condition`` every 0.25 s until it is truthy (Prometheus is asked over HTTP: there
    is no event to wait on); its value.

    Raises:
        TimeoutError: not truthy within ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout_s} s")
        time.sleep(0.25)


def expr(spec: DeploySpec, name: str) -> str:
    return next(a.expr for a in alerts.alerts(spec) if a.name == name)


def models_of(result: list[dict]) -> set[str]:
    return {series["metric"].get("model", "") for series in result}


def add_sub_inputs(datatype: str = "FP32") -> list[httpclient.InferInput]:
    inputs = [httpclient.InferInput("INPUT0", [1, 16], datatype), httpclient.InferInput("INPUT1", [1, 16], "FP32")]
    inputs[0].set_data_from_numpy(np.ones((1, 16), np.float32 if datatype == "FP32" else np.int32))
    inputs[1].set_data_from_numpy(np.ones((1, 16), np.float32))
    return inputs


@dataclass
class Stack:
    prometheus: Prometheus
    explicit: ServerProcess
    poll: ServerProcess
    poll_repository: Path
    started: float


def _serve(repository: Path, ports: tuple[int, int, int], *flags: str) -> ServerProcess:
    http, grpc, metrics = ports
    return ServerProcess([f"--model-repository={repository}", f"--http-port={http}",
                          f"--grpc-port={grpc}", f"--metrics-port={metrics}",
                          "--metrics-config=summary_latencies=true", "--metrics-interval-ms=1000",
                          "--metrics-config=workbench_histograms=true", *flags])


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    if PROMETHEUS is None:
        pytest.skip("prometheus not installed (apt-get install prometheus)")
    root = tmp_path_factory.mktemp("prometheus-live")
    explicit_repository, poll_repository = root / "explicit", root / "poll"
    for repository in (explicit_repository, poll_repository):
        write_model(repository, "add_sub", ADD_SUB_CONFIG, add_sub_graph())
    sleeper = explicit_repository / "sleeper"
    shutil.copytree(SLEEPER, sleeper)
    config = (sleeper / "config.pbtxt").read_text()
    (sleeper / "config.pbtxt").write_text(
        config.replace("max_batch_size: 8", "max_batch_size: 2").replace('"200"', '"300"')
        .replace("max_queue_delay_microseconds: 100000", "max_queue_delay_microseconds: 1000"))
    started: list = []
    try:
        started.append(_serve(explicit_repository, EXPLICIT_PORTS, "--model-control-mode=explicit",
                              "--load-model=*"))
        started.append(_serve(poll_repository, POLL_PORTS, "--model-control-mode=poll",
                              "--repository-poll-secs=1"))
        targets = [f"127.0.0.1:{EXPLICIT_PORTS[2]}", f"127.0.0.1:{POLL_PORTS[2]}"]
        (root / "prom").mkdir()
        started.append(Prometheus(root / "prom", targets, alerts.rules_file(TIGHT)))
        prometheus = started[-1]
        wait_until(lambda: len(prometheus.query(f'up{{job="{JOB}"}} == 1')) == 2, 30, "both targets up")
        wait_until(lambda: len(prometheus.query("workbench_model_ready")) == 3, 30, "readiness scraped")
        yield Stack(prometheus, started[0], started[1], poll_repository, time.time())
    finally:
        for process in reversed(started):
            process.stop()


def test_rules_load_and_evaluate_in_prometheus(stack: Stack) -> None:
    def evaluated() -> list[dict]:
        """The rules once each was evaluated (Prometheus says 0001-01-01 before), else []."""
        groups = stack.prometheus.http.get("/api/v1/rules").json()["data"]["groups"]
        rules = [rule for group in groups for rule in group["rules"]]
        return rules if all(not r["lastEvaluation"].startswith("0001") for r in rules) else []

    rules = wait_until(evaluated, 10, "rules evaluated")
    assert sorted(r["name"] for r in rules) == sorted(a.name for a in alerts.alerts(TIGHT))
    assert {r["health"] for r in rules} == {"ok"}, [r.get("lastError") for r in rules]


def test_every_alert_expression_is_quiet_before_its_event(stack: Stack) -> None:
    for alert in alerts.alerts(TIGHT):
        assert stack.prometheus.query(alert.expr) == [], alert.name


@dataclass
class Load:
    start: float
    successes: int
    errors: int


@pytest.fixture(scope="module")
def load(stack: Stack) -> Iterator[Load]:
    """Steady load on add_sub (every 4th request refused: wrong datatype), a burst of
    :data:`BURST` requests on the slow model once Prometheus scraped the steady load; runs
    until the module's tests are done."""
    start = time.time()
    stop = threading.Event()
    counts = {"success": 0, "error": 0}

    def steady() -> None:
        with httpclient.InferenceServerClient(stack.explicit.url) as client:
            n = 0
            while not stop.is_set():
                n += 1
                try:
                    client.infer("add_sub", add_sub_inputs("INT32" if n % 4 == 0 else "FP32"))
                    counts["success"] += 1
                except InferenceServerException:
                    counts["error"] += 1

    worker = threading.Thread(target=steady, daemon=True)
    worker.start()
    prometheus = stack.prometheus
    try:
        wait_until(lambda: prometheus.query('rate(nv_inference_request_success{model="add_sub"}[10s]) > 0'),
                   20, "steady load scraped")
        with httpclient.InferenceServerClient(stack.explicit.url, concurrency=BURST) as client:
            pending = [client.async_infer("sleeper", add_sub_inputs()) for _ in range(BURST)]
            wait_until(lambda: prometheus.query('nv_inference_pending_request_count{model="sleeper"} > 10'),
                       20, "burst pending scraped")
            for request in pending:
                request.get_result()
        yield Load(start, counts["success"], counts["error"])
    finally:
        stop.set()
        worker.join(10)


# (alert, the models its expression names during the load) for the TIGHT thresholds
UNDER_LOAD = [
    ("WorkbenchErrorRateHigh", {"add_sub"}),
    ("WorkbenchLatencyP99High", {"add_sub", "sleeper"}),
    ("WorkbenchQueueTimeHigh", {"sleeper"}),
    ("WorkbenchPendingRequestsGrowing", {"sleeper"}),
]


@pytest.mark.parametrize(("name", "models"), UNDER_LOAD, ids=[n for n, _ in UNDER_LOAD])
def test_alert_expression_true_under_load(stack: Stack, load: Load, name: str, models: set[str]) -> None:
    prometheus = stack.prometheus
    assert models <= models_of(prometheus.query_range(expr(TIGHT, name), load.start))
    # the rule engine saw it too: the alert went pending (its "for" has not passed)
    assert prometheus.query_range(f'ALERTS{{alertname="{name}"}}', load.start), name
    # with thresholds nothing here reaches, the same expression stays empty
    assert prometheus.query_range(expr(LOOSE, name), load.start) == [], name


DASHBOARD = list(grafana.panel_queries(grafana.dashboard(TIGHT)))


@pytest.mark.parametrize(("title", "query"), DASHBOARD, ids=[f"{t}:{i}" for i, (t, _) in enumerate(DASHBOARD)])
def test_dashboard_panel_returns_data(stack: Stack, load: Load, title: str, query: str) -> None:
    promql = grafana.substitute(query, "30s")
    result = stack.prometheus.query(promql)
    if title in grafana.GPU_PANELS and not stack.prometheus.query("nv_gpu_memory_total_bytes"):
        assert result == []
        pytest.skip("no GPU here: nv_gpu_* families are exported only with NVML and a GPU "
                    "(run on a GPU machine to check this panel)")
    values = [float(series["value"][1]) for series in result]
    assert values, f"{title}: {promql} returned no data"
    assert any(np.isfinite(values)), f"{title}: {promql} returned only {values}"
    # the model variable narrows the panel to one model
    if "$model" in query:
        one = stack.prometheus.query(grafana.substitute(query, "30s", model="add_sub"))
        assert models_of(one) == {"add_sub"}, title


def test_not_ready_after_unload(stack: Stack, load: Load) -> None:
    prometheus = stack.prometheus
    with httpclient.InferenceServerClient(stack.explicit.url) as client:
        client.unload_model("sleeper")
    result = wait_until(lambda: prometheus.query(expr(TIGHT, "WorkbenchModelNotReady")), 15, "not ready")
    assert models_of(result) == {"sleeper"}  # add_sub still serves
    wait_until(lambda: prometheus.query('ALERTS{alertname="WorkbenchModelNotReady",model="sleeper"}'),
               10, "the rule went pending")


def test_poll_failures_when_the_repository_is_gone(stack: Stack) -> None:
    prometheus = stack.prometheus
    name = "WorkbenchRepositoryPollFailing"
    assert prometheus.query(expr(TIGHT, name)) == []
    stack.poll_repository.rename(stack.poll_repository.with_name("moved"))
    try:
        result = wait_until(lambda: prometheus.query(expr(TIGHT, name)), 20, "poll failures")
        assert {s["metric"]["instance"] for s in result} == {f"127.0.0.1:{POLL_PORTS[2]}"}
        wait_until(lambda: prometheus.query(f'ALERTS{{alertname="{name}",alertstate="firing"}}'),
                   10, "the rule fired (no for)")
    finally:
        stack.poll_repository.with_name("moved").rename(stack.poll_repository)


def test_server_down_when_a_server_stops(stack: Stack) -> None:
    prometheus = stack.prometheus
    name = "WorkbenchServerDown"
    assert prometheus.query(expr(TIGHT, name)) == []
    stack.poll.stop()
    result = wait_until(lambda: prometheus.query(expr(TIGHT, name)), 15, "server down")
    assert {s["metric"]["instance"] for s in result} == {f"127.0.0.1:{POLL_PORTS[2]}"}


def test_gpu_memory_alert_needs_a_gpu(stack: Stack) -> None:
    if not stack.prometheus.query("nv_gpu_memory_total_bytes"):
        pytest.skip("no GPU here: nv_gpu_memory_* are exported only with NVML and a GPU; the "
                    "rule's firing and not firing are checked by promtool's unit tests")
    assert stack.prometheus.query(expr(LOOSE, "WorkbenchGpuMemoryNearFull")) == []
