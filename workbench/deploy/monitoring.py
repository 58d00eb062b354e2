"""The monitoring files of a deployment: Prometheus alert rules (plain and ``PrometheusRule``),
their promtool unit tests, and the Grafana dashboard (:mod:`workbench.deploy.alerts`,
:mod:`workbench.deploy.grafana`)."""

from __future__ import annotations

import contextlib

from workbench.deploy import alerts, grafana, yaml_text
from workbench.deploy.spec import DeploySpec


def monitoring_files(spec: DeploySpec) -> dict[str, str]:
    """Path (relative to the deployment folder) -> text. The promtool unit tests are left out
    when ``spec.alert_matchers`` holds a matcher other than ``label="value"`` (the test series
    could not carry it)."""
    files = {
        alerts.RULES_FILE: yaml_text.dump(alerts.rules_file(spec)),
        alerts.PROMETHEUS_RULE_FILE: yaml_text.dump(alerts.prometheus_rule(spec)),
        grafana.DASHBOARD_FILE: grafana.dashboard_text(spec),
    }
    with contextlib.suppress(ValueError):
        files[alerts.RULES_TEST_FILE] = yaml_text.dump(alerts.rule_tests(spec))
    return files


__all__ = ["monitoring_files"]
