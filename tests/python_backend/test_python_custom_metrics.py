"""Python models' custom metrics (``pb_utils.MetricFamily``) on ``/metrics``, as Triton's
python_backend exports them: counter, gauge and histogram in Triton's exposition, the
argument checks and refusals with Triton's texts, and the families gone with the model."""

from __future__ import annotations

import contextlib
import json
import os
import signal
from pathlib import Path

import numpy as np
import pytest

from workbench import InferenceRequest, InternalError, Server, ServerOptions, Tensor
from workbench.frontends.metrics import MetricsFrontend
from workbench.stats.custom_metrics import CustomMetricError, CustomMetrics, MetricKind, format_value

MODEL = '''
import json
import os
import numpy as np
import triton_python_backend_utils as pb_utils


def attempt(call):
    try:
        call()
        return "ok"
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"


class TritonPythonModel:
    def initialize(self, args):
        self.requests = pb_utils.MetricFamily(name="pbm_requests", description="Requests seen",
                                              kind=pb_utils.MetricFamily.COUNTER)
        self.counter = self.requests.Metric(labels={"zone": "b", "app": "a"})
        self.level = pb_utils.MetricFamily("pbm_level", "Last input", pb_utils.MetricFamily.GAUGE)
        self.gauge = self.level.Metric()
        self.sizes = pb_utils.MetricFamily("pbm_sizes", "Input sizes", pb_utils.MetricFamily.HISTOGRAM)
        self.histogram = self.sizes.Metric(labels={"app": "a"}, buckets=[0.1, 1.0, 2.5])

    def execute(self, requests):
        responses = []
        for request in requests:
            x = float(pb_utils.get_input_tensor_by_name(request, "X").as_numpy().flatten()[0])
            if x == -2:
                answer = [str(os.getpid())]
            elif x >= 0:
                self.counter.increment(1)
                self.gauge.set(x)
                self.histogram.observe(x)
                answer = [str(self.counter.value()), str(self.gauge.value())]
            else:
                answer = self.errors()
            out = np.array([a.encode() for a in answer], dtype=np.object_)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", out)]))
        return responses

    def errors(self):
        family = pb_utils.MetricFamily("pbm_gone", "deleted", pb_utils.MetricFamily.GAUGE)
        orphan = family.Metric(labels={"a": "b"})
        del family
        return [
            attempt(lambda: self.counter.increment(-1)),
            attempt(lambda: self.counter.set(3)),
            attempt(lambda: self.gauge.observe(3)),
            attempt(lambda: self.histogram.value()),
            attempt(lambda: self.sizes.Metric(labels={"app": "b"})),
            attempt(lambda: self.sizes.Metric(labels={"app": "b"}, buckets=[2.0, 1.0])),
            attempt(lambda: self.requests.Metric(buckets=[1.0])),
            attempt(lambda: self.requests.Metric(labels=["x"])),
            attempt(lambda: self.requests.Metric(labels={"__x": "y"})),
            attempt(lambda: pb_utils.MetricFamily("pbm_requests", "again", pb_utils.MetricFamily.GAUGE)),
            attempt(lambda: pb_utils.MetricFamily("9bad", "bad", pb_utils.MetricFamily.GAUGE)),
            attempt(lambda: pb_utils.MetricFamily("pbm_x", "x", 0)),
            attempt(lambda: orphan.increment(1)),
        ]
'''
CONFIG = '''
name: "metered"
backend: "python"
input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "Y" data_type: TYPE_STRING dims: [ -1 ] } ]
instance_group [ { count: 2 kind: KIND_CPU } ]
'''


def write_model(repository: Path, instances: int = 2) -> None:
    (repository / "metered" / "1").mkdir(parents=True)
    (repository / "metered" / "config.pbtxt").write_text(CONFIG.replace("count: 2", f"count: {instances}"))
    (repository / "metered" / "1" / "model.py").write_text(MODEL)


async def infer(server: Server, x: float) -> list[str]:
    response = await server.infer(InferenceRequest("metered", [Tensor("X", "FP32", np.array([x], np.float32))]))
    return [v.decode() for v in response.outputs[0].data.flatten()]


async def test_counter_gauge_and_histogram_are_scraped_as_triton_writes_them(tmp_path: Path) -> None:
    write_model(tmp_path)
    async with Server(ServerOptions(model_repository=[str(tmp_path)])) as server:
        frontend = MetricsFrontend(server, server.options)
        text = frontend.render().decode()
        assert ('# HELP pbm_requests Requests seen\n# TYPE pbm_requests counter\n'
                'pbm_requests{app="a",zone="b"} 0\n') in text
        assert 'pbm_sizes_bucket{app="a",le="+Inf"} 0\n' in text
        assert await infer(server, 0.5) == ["1.0", "0.5"]
        assert await infer(server, 2.0) == ["2.0", "2.0"]  # the other instance: the same child
        text = frontend.render().decode()
        assert 'pbm_requests{app="a",zone="b"} 2\n' in text
        assert "# TYPE pbm_level gauge\npbm_level 2\n" in text
        assert ("# HELP pbm_sizes Input sizes\n# TYPE pbm_sizes histogram\n"
                'pbm_sizes_count{app="a"} 2\npbm_sizes_sum{app="a"} 2.5\n'
                'pbm_sizes_bucket{app="a",le="0.1"} 0\npbm_sizes_bucket{app="a",le="1"} 1\n'
                'pbm_sizes_bucket{app="a",le="2.5"} 2\npbm_sizes_bucket{app="a",le="+Inf"} 2\n') in text
        assert text.count("# TYPE pbm_requests") == 1  # two instances, one family


async def test_refusals_raise_in_the_model_with_tritons_texts(tmp_path: Path) -> None:
    write_model(tmp_path)
    async with Server(ServerOptions(model_repository=[str(tmp_path)])) as server:
        errors = await infer(server, -1)
        text = MetricsFrontend(server, server.options).render().decode()
    cleared = ("Invalid metric operation as the corresponding 'MetricFamily' has been deleted. The "
               "'MetricFamily' object should be deleted AFTER its corresponding 'Metric' objects have been deleted.")
    assert errors[:12] == [
        "TritonModelException: Failed to increment metric value: TRITONSERVER_METRIC_KIND_COUNTER can "
        "only be incremented monotonically by non-negative values.",
        "TritonModelException: Failed to set metric value: TRITONSERVER_METRIC_KIND_COUNTER does not support Set",
        "TritonModelException: Failed to observe metric value: TRITONSERVER_METRIC_KIND_GAUGE does not support Observe",
        "TritonModelException: Failed to get metric value: TRITONSERVER_METRIC_KIND_HISTOGRAM does not support Value",
        "TritonModelException: Failed to create metric. Missing required buckets.",
        "TritonModelException: Error when creating Metric: Bucket Boundaries must be strictly sorted",
        "TritonModelException: Failed to create metric. Unexpected buckets found.",
        "TritonModelException: Failed to create metric. Labels must be a dictionary.",
        "TritonModelException: Error when creating Metric: Invalid label name",
        "TritonModelException: Error when creating MetricFamily: Family name already exists with different type",
        "TritonModelException: Error when creating MetricFamily: Invalid metric name",
        errors[11],
    ]
    assert errors[11].startswith("TypeError: __init__(): incompatible constructor arguments: 'kind'")
    assert errors[12] == f"TritonModelException: Failed to increment metric value: {cleared}"
    assert "pbm_gone" not in text  # the deleted family left the scrape
    assert 'pbm_requests{app="a",zone="b"} 0\n' in text  # the refused calls changed nothing


async def test_unloading_the_model_removes_its_families(tmp_path: Path) -> None:
    write_model(tmp_path)
    options = ServerOptions(model_repository=[str(tmp_path)], model_control_mode="explicit", load_model=["metered"])
    async with Server(options) as server:
        frontend = MetricsFrontend(server, server.options)
        await infer(server, 1.0)
        assert "pbm_requests{" in frontend.render().decode()
        await server.unload_model("metered")
        text = frontend.render().decode()
        assert "pbm_" not in text
        assert server.custom_metrics.handle_count() == 0
        await server.load_model("metered")  # a new load starts at 0
        assert 'pbm_requests{app="a",zone="b"} 0\n' in frontend.render().decode()


async def test_a_crashed_stubs_metrics_go_with_it(tmp_path: Path) -> None:
    write_model(tmp_path, instances=1)
    async with Server(ServerOptions(model_repository=[str(tmp_path)])) as server:
        frontend = MetricsFrontend(server, server.options)
        await infer(server, 1.0)
        assert 'pbm_requests{app="a",zone="b"} 1\n' in frontend.render().decode()
        os.kill(int((await infer(server, -2))[0]), signal.SIGKILL)
        with contextlib.suppress(InternalError):  # the request that finds the stub down fails
            await infer(server, -2)
        await infer(server, -2)  # the restarted stub ran initialize: its metrics are new
        assert 'pbm_requests{app="a",zone="b"} 0\n' in frontend.render().decode()  # the old stub's went


def test_registry_shares_children_keeps_the_first_description_and_refuses_another_kind() -> None:
    metrics = CustomMetrics()
    first = metrics.family_new("a", "fam", "first", MetricKind.COUNTER)
    second = metrics.family_new("b", "fam", "second", MetricKind.COUNTER)
    with pytest.raises(CustomMetricError, match="Family name already exists with different type"):
        metrics.family_new("b", "fam", "x", MetricKind.GAUGE)
    one = metrics.metric_new("a", first, {"k": "v"}, None)
    two = metrics.metric_new("b", second, {"k": "v"}, None)
    metrics.increment("a", one, 7.5)
    assert metrics.value("b", two) == 7.5
    with pytest.raises(CustomMetricError, match="invalidated"):  # another owner's handle
        metrics.increment("b", one, 1)
    metrics.release("a")
    assert metrics.render() == '# HELP fam first\n# TYPE fam counter\nfam{k="v"} 7.5\n'
    metrics.release("b")
    assert metrics.render() == "" and metrics.handle_count() == 0
    with pytest.raises(CustomMetricError, match="reserved"):
        metrics.family_new("a", "nv_inference_count", "x", MetricKind.COUNTER)
    assert [format_value(v) for v in (0.0, 2023.0, 7.55, 1e20, float("inf"))] == ["0", "2023", "7.55", "1e+20", "+Inf"]
    assert json.dumps(MetricKind.GAUGE) == "1"


def test_an_invalidated_histogram_says_observe() -> None:
    """observe on an invalidated metric said "Could not set metric value" (Triton's
    Metric::Observe: "Could not observe metric value. Metric has been invalidated.")."""
    metrics = CustomMetrics()
    family = metrics.family_new("a", "h", "d", MetricKind.HISTOGRAM)
    child = metrics.metric_new("a", family, {}, [1.0])
    with pytest.raises(CustomMetricError, match=r"^Could not observe metric value\. Metric has been invalidated\.$"):
        metrics.observe("b", child, 0.5)
