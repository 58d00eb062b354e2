"""`workbench deploy`'s alert rules and Grafana dashboard, checked by the real promtool
(Debian's ``prometheus`` package: ``promtool check rules`` and ``promtool test rules``).
The live checks against a real Prometheus scraping a real server: tests/e2e/test_prometheus_live.py."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from workbench.deploy import alerts, grafana, kubernetes, yaml_text
from workbench.deploy.dockerfile import dockerfile
from workbench.deploy.monitoring import monitoring_files
from workbench.deploy.spec import DeploySpec
from workbench.hosts.cli import main

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool not installed (apt-get install prometheus)")
ALERT_NAMES = [a.name for a in alerts.alerts(DeploySpec())]
#: a spec whose thresholds all differ from the defaults
CUSTOM = DeploySpec(name="digits", alert_error_rate=0.3, alert_p99_latency_us=1234,
                    alert_queue_time_us=7, alert_pending_requests=1, alert_gpu_memory_fraction=0.55)


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *args], cwd=cwd, capture_output=True, text=True, timeout=60)


def write_rules(folder: Path, spec: DeploySpec, rules: dict | None = None,
                tests_spec: DeploySpec | None = None) -> None:
    """``alerts.rules.yml`` (``rules`` or the spec's) and ``alerts.test.yml`` (the tests of
    ``tests_spec``, default ``spec``) in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "alerts.rules.yml").write_text(yaml_text.dump(rules or alerts.rules_file(spec)))
    (folder / "alerts.test.yml").write_text(yaml_text.dump(alerts.rule_tests(tests_spec or spec)))


def failed_alerts(output: str) -> set[str]:
    return set(re.findall(r"alertname: (\w+), time: ", output))


@needs_promtool
def test_cli_writes_rules_that_promtool_checks_and_tests(tmp_path: Path, capsys) -> None:
    repository = tmp_path / "repo"
    (repository / "m" / "1").mkdir(parents=True)
    out = tmp_path / "deploy"
    assert main(["deploy", f"--model-repository={repository}", f"--out={out}", "--name=digits",
                 "--alert-error-rate=0.3", "--alert-p99-latency-us=1234", "--alert-queue-time-us=7",
                 "--alert-pending-requests=1", "--alert-gpu-memory-fraction=0.55"]) == 0
    assert (out / alerts.RULES_FILE).read_text() == yaml_text.dump(alerts.rules_file(CUSTOM))
    checked = promtool("check", "rules", alerts.RULES_FILE, cwd=out)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(ALERT_NAMES)} rules found" in checked.stdout
    tested = promtool("test", "rules", alerts.RULES_TEST_FILE, cwd=out)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    # the PrometheusRule carries the same groups: promtool checks them as a rules file
    rule = json.loads(json.dumps(alerts.prometheus_rule(CUSTOM)))
    assert (rule["apiVersion"], rule["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    (tmp_path / "from-crd.yml").write_text(yaml_text.dump({"groups": rule["spec"]["groups"]}))
    assert promtool("check", "rules", "from-crd.yml", cwd=tmp_path).returncode == 0
    assert (out / alerts.PROMETHEUS_RULE_FILE).read_text() == yaml_text.dump(rule)
    dashboard = json.loads((out / grafana.DASHBOARD_FILE).read_text())
    assert dashboard["title"] == "workbench: digits"


@needs_promtool
@pytest.mark.parametrize("spec", [DeploySpec(), CUSTOM], ids=["defaults", "custom"])
def test_unit_tests_pass_for_every_alert(tmp_path: Path, spec: DeploySpec) -> None:
    write_rules(tmp_path, spec)
    tests = alerts.rule_tests(spec)["tests"]
    assert sorted(t["alert_rule_test"][0]["alertname"] for t in tests) == sorted(ALERT_NAMES)
    for test in tests:  # each alert: an evaluation where nothing fires, one where it does
        early, late = test["alert_rule_test"]
        assert early["exp_alerts"] == [] and len(late["exp_alerts"]) == 1
        assert len(test["input_series"]) >= 2  # series that fire and series that do not
    result = promtool("test", "rules", "alerts.test.yml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def _mutated(spec: DeploySpec, change) -> dict:
    rules = alerts.rules_file(spec)
    for rule in rules["groups"][0]["rules"]:
        change(rule)
    return rules


@needs_promtool
def test_unit_tests_fail_when_an_alert_never_fires(tmp_path: Path) -> None:
    rules = _mutated(DeploySpec(), lambda rule: rule.update(expr="vector(1) > 2"))
    write_rules(tmp_path, DeploySpec(), rules)
    result = promtool("test", "rules", "alerts.test.yml", cwd=tmp_path)
    assert result.returncode == 1
    assert failed_alerts(result.stdout + result.stderr) == set(ALERT_NAMES)


@needs_promtool
def test_unit_tests_fail_when_an_alert_ignores_its_for(tmp_path: Path) -> None:
    rules = _mutated(DeploySpec(), lambda rule: rule.pop("for", None))
    write_rules(tmp_path, DeploySpec(), rules)
    result = promtool("test", "rules", "alerts.test.yml", cwd=tmp_path)
    assert result.returncode == 1
    with_for = {a.name for a in alerts.alerts(DeploySpec()) if a.for_ != "0m"}
    assert failed_alerts(result.stdout + result.stderr) == with_for


@needs_promtool
def test_unit_tests_fail_when_a_threshold_is_lower(tmp_path: Path) -> None:
    """Rules with a quarter of each threshold fire on the series that must not fire."""
    spec = DeploySpec()
    lower = dataclasses.replace(spec, alert_error_rate=spec.alert_error_rate / 4,
                                alert_p99_latency_us=spec.alert_p99_latency_us // 4,
                                alert_queue_time_us=spec.alert_queue_time_us // 4,
                                alert_gpu_memory_fraction=spec.alert_gpu_memory_fraction / 4)
    write_rules(tmp_path, spec, alerts.rules_file(lower), tests_spec=spec)
    result = promtool("test", "rules", "alerts.test.yml", cwd=tmp_path)
    assert result.returncode == 1
    assert failed_alerts(result.stdout + result.stderr) == {
        "WorkbenchErrorRateHigh", "WorkbenchLatencyP99High", "WorkbenchQueueTimeHigh",
        "WorkbenchGpuMemoryNearFull"}


def test_alert_matchers_select_the_series() -> None:
    spec = DeploySpec(alert_matchers='namespace="prod",service="digits"')
    for alert in alerts.alerts(spec):
        assert '{namespace="prod",service="digits"' in alert.expr
    assert alerts.rule_tests(spec)["tests"][0]["input_series"][0]["series"].startswith(
        'workbench_model_ready{namespace="prod",service="digits",')
    assert all('job="workbench"' in a.expr for a in alerts.alerts(DeploySpec()))


@pytest.mark.parametrize("bad", [{"alert_error_rate": 0}, {"alert_error_rate": 1.5},
                                 {"alert_gpu_memory_fraction": 1}, {"alert_p99_latency_us": 0},
                                 {"alert_pending_requests": 0}, {"alert_matchers": 'job="a"}'}])
def test_spec_refuses_bad_alert_values(bad: dict) -> None:
    with pytest.raises(ValueError):
        DeploySpec(**bad)


def test_dashboard_panels_and_variables() -> None:
    model = grafana.dashboard(DeploySpec(name="digits"))
    titles = [panel["title"] for panel in model["panels"]]
    for wanted in ("Throughput", "Latency p50 / p95 / p99", "Queue vs compute (per request)",
                   "Error rate by reason", "Batch size (inferences per execution)",
                   "Pending requests", *grafana.GPU_PANELS):
        assert wanted in titles
    assert [v["name"] for v in model["templating"]["list"]] == ["datasource", "model", "version"]
    assert len({panel["id"] for panel in model["panels"]}) == len(titles)
    for title, expr in grafana.panel_queries(model):
        assert 'job="digits"' in expr, title
        if title not in grafana.GPU_PANELS and "up{" not in expr and "cpu" not in expr:
            assert 'model=~"$model",version=~"$version"' in expr, title
        assert "$" not in grafana.substitute(expr), title
    latency = [e for t, e in grafana.panel_queries(model) if t.startswith("Latency")]
    assert [re.findall(r'quantile="([\d.]+)"', e) for e in latency] == [["0.5"], ["0.95"], ["0.99"]]
    assert grafana.substitute("rate(x{model=~\"$model\"}[$__rate_interval])", "1m", model="a|b") \
        == 'rate(x{model=~"a|b"}[1m])'


def test_the_deployment_serves_the_summary_the_p99_reads() -> None:
    spec = DeploySpec()
    container = kubernetes.deployment(spec)["spec"]["template"]["spec"]["containers"][0]
    assert "--metrics-config=summary_latencies=true" in container["args"]
    assert "--metrics-config=summary_latencies=true" in dockerfile(spec, [], None)
    # the histogram panels' families (beyond Triton)
    assert "--metrics-config=workbench_histograms=true" in container["args"]


def test_dashboard_has_the_histogram_panels() -> None:
    queries = list(grafana.panel_queries(grafana.dashboard(DeploySpec(name="digits"))))
    families = {name for _, e in queries for name in re.findall(r"workbench_\w+", e)}
    assert {"workbench_request_duration_us_bucket", "workbench_queue_duration_us_bucket",
            "workbench_compute_duration_us_bucket", "workbench_batch_size_bucket",
            "workbench_batch_fill_ratio_sum", "workbench_batch_preferred_executions_total"} <= families


def test_no_unit_tests_for_regex_matchers() -> None:
    files = monitoring_files(DeploySpec(alert_matchers='namespace=~"prod-.*"'))
    assert alerts.RULES_TEST_FILE not in files
    assert 'namespace=~\\"prod-.*\\"' in files[alerts.RULES_FILE]  # a YAML-quoted string
    assert alerts.RULES_TEST_FILE in monitoring_files(DeploySpec())
