"""Prometheus alert rules for a ``workbench serve`` deployment, and promtool unit tests for them.

``workbench deploy`` writes one rule group twice, ``prometheus/alerts.rules.yml`` (plain
rules file) and ``k8s/prometheus-rule.yaml`` (a ``PrometheusRule``), plus
``prometheus/alerts.test.yml`` for ``promtool test rules`` (per alert: series that fire it,
series that do not, an evaluation before its ``for`` has passed).

Alerts (thresholds from :class:`~workbench.deploy.spec.DeploySpec`; every expression restricted
to ``spec.alert_selector``, default ``job="<name>"``): ``WorkbenchModelNotReady``,
``WorkbenchErrorRateHigh``, ``WorkbenchLatencyP99High`` (Triton's
``nv_inference_request_summary_us``), ``WorkbenchQueueTimeHigh``,
``WorkbenchPendingRequestsGrowing``, ``WorkbenchGpuMemoryNearFull``, ``WorkbenchServerDown``,
``WorkbenchRepositoryPollFailing``. Latencies are **microseconds**, as Triton's ``*_us``
families. What each fires on, and the flags: docs/deploy.md, "Prometheus alert rules and
Grafana dashboard"."""

from __future__ import annotations

import math
from dataclasses import dataclass

from workbench.deploy.spec import DeploySpec

#: the rules file and its unit tests, relative to the deployment folder (``promtool test
#: rules`` reads ``rule_files`` relative to the test file)
RULES_FILE = "prometheus/alerts.rules.yml"
RULES_TEST_FILE = "prometheus/alerts.test.yml"
PROMETHEUS_RULE_FILE = "k8s/prometheus-rule.yaml"


@dataclass(frozen=True)
class Alert:
    """One alerting rule.

    Attributes:
        name: the ``alert:`` name.
        expr: its PromQL expression (true = firing once ``for_`` has passed).
        for_: Prometheus duration the expression must hold (``"0m"``: fires at once).
        severity: the ``severity`` label (``critical`` / ``warning``).
        summary, description: annotations (Go templates over ``$labels`` / ``$value``).
    """

    name: str
    expr: str
    for_: str
    severity: str
    summary: str
    description: str

    def rule(self) -> dict:
        """The rule as a Prometheus rules-file mapping."""
        rule: dict = {"alert": self.name, "expr": self.expr}
        if self.for_ != "0m":
            rule["for"] = self.for_
        rule["labels"] = {"severity": self.severity}
        rule["annotations"] = {"summary": self.summary, "description": self.description}
        return rule


def alerts(spec: DeploySpec) -> list[Alert]:
    """The alert rules of a deployment (see the module table), in order."""
    s = spec.alert_selector
    failures = f"sum without (reason) (rate(nv_inference_request_failure{{{s}}}[5m]))"
    successes = f"rate(nv_inference_request_success{{{s}}}[5m])"
    where = "{{ $labels.model }} version {{ $labels.version }} on {{ $labels.instance }}"
    return [
        Alert("WorkbenchModelNotReady",
              f"max without (version) (workbench_model_ready{{{s}}}) == 0", "5m", "critical",
              "Model {{ $labels.model }} is not ready on {{ $labels.instance }}",
              "No version of model {{ $labels.model }} is READY (loading, unloaded or failed "
              "to load: see the repository index for the reason)."),
        Alert("WorkbenchErrorRateHigh",
              f"{failures} / ({failures} + {successes}) > {_number(spec.alert_error_rate)}",
              "5m", "critical",
              f"Error rate of {where} is above {spec.alert_error_rate:.0%}",
              "{{ $value | humanizePercentage }} of the requests failed over 5 minutes "
              "(nv_inference_request_failure by reason tells why)."),
        Alert("WorkbenchLatencyP99High",
              f'nv_inference_request_summary_us{{{s},quantile="0.99"}} > {spec.alert_p99_latency_us}',
              "5m", "warning",
              f"p99 latency of {where} is above {spec.alert_p99_latency_us} µs",
              "p99 request latency is {{ printf \"%.0f\" $value }} µs (SLA "
              f"{spec.alert_p99_latency_us} µs)."),
        Alert("WorkbenchQueueTimeHigh",
              f"rate(nv_inference_queue_duration_us{{{s}}}[5m]) / {successes} "
              f"> {spec.alert_queue_time_us}",
              "5m", "warning",
              f"Queue time of {where} is above {spec.alert_queue_time_us} µs",
              "Requests wait {{ printf \"%.0f\" $value }} µs on average in the queue (SLA "
              f"{spec.alert_queue_time_us} µs): add instances or replicas."),
        Alert("WorkbenchPendingRequestsGrowing",
              f"nv_inference_pending_request_count{{{s}}} > {spec.alert_pending_requests} "
              f"and delta(nv_inference_pending_request_count{{{s}}}[5m]) > 0",
              "2m", "warning",
              f"Pending requests of {where} keep growing",
              "{{ printf \"%.0f\" $value }} requests wait for execution and the number keeps growing "
              "(more arrive than the model executes)."),
        Alert("WorkbenchGpuMemoryNearFull",
              f"nv_gpu_memory_used_bytes{{{s}}} / nv_gpu_memory_total_bytes{{{s}}} "
              f"> {_number(spec.alert_gpu_memory_fraction)}",
              "5m", "warning",
              "GPU {{ $labels.gpu_uuid }} on {{ $labels.instance }} is almost full",
              "{{ $value | humanizePercentage }} of the GPU memory is used."),
        Alert("WorkbenchServerDown", f"up{{{s}}} == 0", "1m", "critical",
              "workbench server {{ $labels.instance }} is down",
              "Prometheus cannot scrape {{ $labels.instance }}."),
        Alert("WorkbenchRepositoryPollFailing",
              f"increase(workbench_repository_poll_failures_total{{{s}}}[10m]) > 0", "0m", "warning",
              "Model repository polls fail on {{ $labels.instance }}",
              "A poll of the model repository failed in the last 10 minutes (the repository "
              "is unreachable or unreadable): changes are not applied. See the server log."),
    ]


def rule_groups(spec: DeploySpec) -> list[dict]:
    """The ``groups:`` of the rules file (one group, ``<name>.rules``)."""
    return [{"name": f"{spec.name}.rules", "rules": [a.rule() for a in alerts(spec)]}]


def rules_file(spec: DeploySpec) -> dict:
    """The plain Prometheus rules file (``rule_files:``)."""
    return {"groups": rule_groups(spec)}


def prometheus_rule(spec: DeploySpec) -> dict:
    """The same rules as a ``PrometheusRule`` (``monitoring.coreos.com/v1``, Prometheus
    operator); labelled ``app.kubernetes.io/name: <name>`` for a ``ruleSelector``."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": f"{spec.name}-alerts",
                     "labels": {"app.kubernetes.io/name": spec.name,
                                "app.kubernetes.io/part-of": "workbench"}},
        "spec": {"groups": rule_groups(spec)},
    }


def rule_tests(spec: DeploySpec, rules_path: str = "alerts.rules.yml") -> dict:
    """promtool unit tests (``promtool test rules``) of :func:`alerts`: per alert, input
    series that fire it, series that must not (below the threshold, another version
    serving, a quantile other than 0.99, a constant queue...), and an evaluation before its
    ``for`` has passed where nothing fires yet. Values derive from ``spec``'s thresholds.
    ``rules_path``: the rules file, relative to the test file."""
    job = _selector_labels(spec)
    return {"rule_files": [rules_path], "evaluation_interval": "1m",
            "tests": [test(job, spec) for test in _TESTS]}


def _selector_labels(spec: DeploySpec) -> dict[str, str]:
    """The equality matchers of ``alert_selector`` as labels for test series.

    Raises:
        ValueError: a matcher that is not ``label="value"`` (no series to test it with).
    """
    labels = {}
    for matcher in filter(None, (m.strip() for m in spec.alert_selector.split(","))):
        name, sep, value = matcher.partition("=")
        if not sep or not value.startswith('"') or not value.endswith('"') or name.endswith(("!", "~")):
            raise ValueError(f"cannot write unit tests for the matcher '{matcher}' "
                             "(only label=\"value\")")
        labels[name.strip()] = value[1:-1]
    return labels


def _series(name: str, labels: dict[str, str], values: str) -> dict:
    text = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{name}{{{text}}}", "values": values}


def _number(value: float) -> str:
    """A float as PromQL reads it, without a trailing ``.0`` for integers."""
    return repr(int(value)) if float(value).is_integer() else repr(float(value))


def _one_alert(name: str, series: list[dict], fired: list[dict], early: str,
               late: str = "15m") -> dict:
    """A test group: at ``early`` nothing fires yet, at ``late`` exactly ``fired``."""
    return {"interval": "1m", "input_series": series, "alert_rule_test": [
        {"eval_time": early, "alertname": name, "exp_alerts": []},
        {"eval_time": late, "alertname": name, "exp_alerts": fired},
    ]}


def _fired(spec: DeploySpec, name: str, labels: dict[str, str], value: float) -> dict:
    """An expected alert: its labels and its annotations as Prometheus renders them for
    ``labels`` and ``value`` (the templates' ``$labels.*``, ``$value`` with ``printf "%.0f"``
    or ``humanizePercentage``)."""
    alert = next(a for a in alerts(spec) if a.name == name)
    return {"exp_labels": {**labels, "severity": alert.severity},
            "exp_annotations": {"summary": _render(alert.summary, labels, value),
                                "description": _render(alert.description, labels, value)}}


def _render(template: str, labels: dict[str, str], value: float) -> str:
    """The few Go template forms :func:`alerts` uses, rendered as Prometheus does."""
    text = template.replace('{{ printf "%.0f" $value }}', f"{value:.0f}")
    text = text.replace("{{ $value | humanizePercentage }}", "%.4g%%" % (value * 100))
    for label, label_value in labels.items():
        text = text.replace(f"{{{{ $labels.{label} }}}}", label_value)
    if "{{" in text:
        raise ValueError(f"template form not rendered here: {template}")
    return text


def _test_not_ready(job: dict[str, str], spec: DeploySpec) -> dict:
    at = {**job, "instance": "a:8002"}
    return _one_alert("WorkbenchModelNotReady", [
        _series("workbench_model_ready", {**at, "model": "down", "version": "1"}, "0x20"),
        _series("workbench_model_ready", {**at, "model": "up", "version": "1"}, "1x20"),
        # a new version loading beside a READY one: the model serves, no alert
        _series("workbench_model_ready", {**at, "model": "reloading", "version": "1"}, "1x20"),
        _series("workbench_model_ready", {**at, "model": "reloading", "version": "2"}, "0x20"),
    ], [_fired(spec, "WorkbenchModelNotReady", {**at, "model": "down"}, 0)], early="3m")


def _test_error_rate(job: dict[str, str], spec: DeploySpec) -> dict:
    per_minute = 1000.0
    bad = min(1.0, 2 * spec.alert_error_rate) * per_minute  # twice the threshold
    good = spec.alert_error_rate / 2 * per_minute  # half of it
    series = []
    for model, failed in (("bad", bad), ("good", good)):
        at = {**job, "instance": "a:8002", "model": model, "version": "1"}
        series += [
            _series("nv_inference_request_failure", {**at, "reason": "BACKEND"}, f"0+{failed:g}x20"),
            _series("nv_inference_request_failure", {**at, "reason": "OTHER"}, "0x20"),
            _series("nv_inference_request_success", at, f"0+{per_minute - failed:g}x20"),
        ]
    # no traffic at all (0 / 0): no alert
    idle = {**job, "instance": "a:8002", "model": "idle", "version": "1"}
    series += [_series("nv_inference_request_failure", {**idle, "reason": "BACKEND"}, "0x20"),
               _series("nv_inference_request_success", idle, "0x20")]
    fired = {**job, "instance": "a:8002", "model": "bad", "version": "1"}
    return _one_alert("WorkbenchErrorRateHigh", series,
                      [_fired(spec, "WorkbenchErrorRateHigh", fired, bad / per_minute)], early="3m")


def _test_p99(job: dict[str, str], spec: DeploySpec) -> dict:
    sla = spec.alert_p99_latency_us
    at = {**job, "instance": "a:8002", "version": "1"}
    name = "nv_inference_request_summary_us"
    return _one_alert("WorkbenchLatencyP99High", [
        _series(name, {**at, "model": "slow", "quantile": "0.99"}, f"{2 * sla}x20"),
        _series(name, {**at, "model": "fast", "quantile": "0.99"}, f"{sla / 2:g}x20"),
        _series(name, {**at, "model": "fast", "quantile": "0.5"}, f"{2 * sla}x20"),  # p50 is not p99
    ], [_fired(spec, "WorkbenchLatencyP99High", {**at, "model": "slow", "quantile": "0.99"}, 2 * sla)],
        early="3m")


def _test_queue_time(job: dict[str, str], spec: DeploySpec) -> dict:
    sla = spec.alert_queue_time_us
    series = []
    for model, mean_us in (("queued", 2 * sla), ("flowing", sla / 2)):
        at = {**job, "instance": "a:8002", "model": model, "version": "1"}
        series += [_series("nv_inference_queue_duration_us", at, f"0+{100 * mean_us:g}x20"),
                   _series("nv_inference_request_success", at, "0+100x20")]
    fired = {**job, "instance": "a:8002", "model": "queued", "version": "1"}
    return _one_alert("WorkbenchQueueTimeHigh", series,
                      [_fired(spec, "WorkbenchQueueTimeHigh", fired, 2 * sla)], early="3m")


def _test_pending(job: dict[str, str], spec: DeploySpec) -> dict:
    limit = spec.alert_pending_requests
    step = max(1, math.ceil(limit / 5))  # above the limit after at most 6 minutes, growing on
    at = {**job, "instance": "a:8002", "version": "1"}
    name = "nv_inference_pending_request_count"
    return _one_alert("WorkbenchPendingRequestsGrowing", [
        _series(name, {**at, "model": "growing"}, f"0+{step}x20"),
        _series(name, {**at, "model": "high_but_flat"}, f"{2 * limit + 1}x20"),
        _series(name, {**at, "model": "idle"}, "0x20"),
    ], [_fired(spec, "WorkbenchPendingRequestsGrowing", {**at, "model": "growing"}, 15 * step)],
        early=f"{limit // step + 2}m")  # above the limit since a minute: its "for" not passed yet


def _test_gpu_memory(job: dict[str, str], spec: DeploySpec) -> dict:
    total = 80e9
    full = (1 + spec.alert_gpu_memory_fraction) / 2 * total
    half = spec.alert_gpu_memory_fraction / 2 * total
    series = []
    for gpu, used in (("GPU-full", full), ("GPU-roomy", half)):
        at = {**job, "instance": "a:8002", "gpu_uuid": gpu}
        series += [_series("nv_gpu_memory_used_bytes", at, f"{used:.0f}x20"),
                   _series("nv_gpu_memory_total_bytes", at, f"{total:.0f}x20")]
    fired = {**job, "instance": "a:8002", "gpu_uuid": "GPU-full"}
    return _one_alert("WorkbenchGpuMemoryNearFull", series,
                      [_fired(spec, "WorkbenchGpuMemoryNearFull", fired, full / total)], early="3m")


def _test_server_down(job: dict[str, str], spec: DeploySpec) -> dict:
    return _one_alert("WorkbenchServerDown", [
        _series("up", {**job, "instance": "a:8002"}, "0x20"),
        _series("up", {**job, "instance": "b:8002"}, "1x20"),
    ], [_fired(spec, "WorkbenchServerDown", {**job, "instance": "a:8002"}, 0)], early="0m", late="5m")


def _test_poll_failing(job: dict[str, str], spec: DeploySpec) -> dict:
    name = "workbench_repository_poll_failures_total"
    return _one_alert("WorkbenchRepositoryPollFailing", [
        _series(name, {**job, "instance": "a:8002"}, "0x5 1x15"),  # one failed poll at 6 min
        _series(name, {**job, "instance": "b:8002"}, "0x20"),
    ], [_fired(spec, "WorkbenchRepositoryPollFailing", {**job, "instance": "a:8002"}, 1)],
        early="4m", late="10m")


_TESTS = (_test_not_ready, _test_error_rate, _test_p99, _test_queue_time, _test_pending,
          _test_gpu_memory, _test_server_down, _test_poll_failing)

__all__ = ["PROMETHEUS_RULE_FILE", "RULES_FILE", "RULES_TEST_FILE", "Alert", "alerts",
           "prometheus_rule", "rule_groups", "rule_tests", "rules_file"]
