"""A Grafana dashboard (JSON model) for a ``workbench serve`` deployment scraped by Prometheus.

``workbench deploy`` writes it to ``grafana/dashboard.json``. Template variables:
``datasource``, ``model`` and ``version`` (multi-value, "All", read from
``nv_inference_request_success``); every query is restricted to ``spec.alert_selector``
(default ``job="<name>"``) and aggregated per model and version across replicas.

Panels read Triton's families (``nv_inference_count``, ``_request_success`` / ``_failure``,
``_exec_count``, the ``*_duration_us`` counters as mean **µs** per request,
``nv_inference_request_summary_us`` quantiles in µs with the worst replica,
``nv_inference_pending_request_count``, ``nv_gpu_*``, ``nv_cpu_*``, ``up``) and, beyond
Triton, ``workbench_model_ready`` and the ``workbench_*`` histograms (p99 durations in µs,
formed batch size, batch fill and preferred-size share; they need ``--metrics-config
workbench_histograms=true``). Panel list for users: docs/deploy.md, "Prometheus alert rules
and Grafana dashboard"."""

from __future__ import annotations

import json
from collections.abc import Iterator

from workbench.deploy.spec import DeploySpec

DASHBOARD_FILE = "grafana/dashboard.json"
#: the template variables the queries use, with what "All" stands for
TEMPLATE_VARIABLES = ("model", "version")
#: panels whose families exist only with a GPU (``nv_gpu_*``, NVML)
GPU_PANELS = ("GPU utilisation", "GPU memory")
_DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


def dashboard(spec: DeploySpec) -> dict:
    """The dashboard's JSON model (Grafana schema 39), titled ``workbench: <name>``."""
    panels = []
    for index, (title, unit, targets) in enumerate(_panels(spec)):
        panels.append({
            "id": index + 1,
            "type": "timeseries",
            "title": title,
            "datasource": _DATASOURCE,
            "gridPos": {"x": (index % 2) * 12, "y": (index // 2) * 8, "w": 12, "h": 8},
            "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
            "options": {"legend": {"displayMode": "list", "placement": "bottom"}},
            "targets": [{"refId": chr(ord("A") + i), "datasource": _DATASOURCE, "expr": expr,
                         "legendFormat": legend} for i, (expr, legend) in enumerate(targets)],
        })
    return {
        "title": f"workbench: {spec.name}",
        "uid": f"workbench-{spec.name}"[:40],
        "tags": ["workbench", "triton"],
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "time": {"from": "now-1h", "to": "now"},
        "refresh": "30s",
        "templating": {"list": _variables(spec)},
        "panels": panels,
    }


def dashboard_text(spec: DeploySpec) -> str:
    """:func:`dashboard` as indented JSON text (the file ``workbench deploy`` writes)."""
    return json.dumps(dashboard(spec), indent=2, ensure_ascii=False) + "\n"


def panel_queries(model: dict) -> Iterator[tuple[str, str]]:
    """``(panel title, PromQL)`` of every target of a dashboard JSON model, as written
    (template variables not substituted; see :func:`substitute`)."""
    for panel in model["panels"]:
        for target in panel["targets"]:
            yield panel["title"], target["expr"]


def substitute(expr: str, rate_interval: str = "5m", **values: str) -> str:
    """``expr`` with Grafana's variables replaced as Grafana does for a query:
    ``$__rate_interval`` by ``rate_interval`` and ``$model`` / ``$version`` by ``values``
    (regexes; default ``.*``, the variables' "All")."""
    expr = expr.replace("$__rate_interval", rate_interval)
    for name in TEMPLATE_VARIABLES:
        expr = expr.replace(f"${name}", values.get(name, ".*"))
    return expr


def _variables(spec: DeploySpec) -> list[dict]:
    s = spec.alert_selector
    datasource = {"name": "datasource", "label": "Data source", "type": "datasource",
                  "query": "prometheus", "current": {}, "hide": 0}
    variables = [datasource]
    for name, query in (
        ("model", f"label_values(nv_inference_request_success{{{s}}}, model)"),
        ("version", f'label_values(nv_inference_request_success{{{s},model=~"$model"}}, version)'),
    ):
        variables.append({
            "name": name, "label": name.capitalize(), "type": "query", "datasource": _DATASOURCE,
            "query": {"query": query, "refId": f"{name}-values"}, "definition": query,
            "refresh": 2, "multi": True, "includeAll": True, "allValue": ".*",
            "current": {"text": "All", "value": "$__all"}, "sort": 1, "hide": 0,
        })
    return variables


def _panels(spec: DeploySpec) -> list[tuple[str, str, list[tuple[str, str]]]]:
    """``(title, unit, [(expr, legend), ...])`` of each panel, in order."""
    s = spec.alert_selector
    m = f'{s},model=~"$model",version=~"$version"'
    by = "sum by (model, version)"
    legend = "{{model}} v{{version}}"

    def rate(family: str, extra: str = "") -> str:
        return f"rate({family}{{{m}{extra}}}[$__rate_interval])"

    per_request = f"{by} ({rate('nv_inference_request_success')})"
    return [
        ("Throughput", "reqps", [
            (f"{by} ({rate('nv_inference_count')})", f"{legend} inferences/s"),
            (per_request, f"{legend} requests/s"),
        ]),
        ("Latency p50 / p95 / p99", "µs", [
            (f'max by (model, version) (nv_inference_request_summary_us{{{m},quantile="{q}"}})',
             f"{legend} p{name}") for q, name in (("0.5", "50"), ("0.95", "95"), ("0.99", "99"))
        ]),
        ("Queue vs compute (per request)", "µs", [
            (f"{by} ({rate(f'nv_inference_{part}_duration_us')}) / {per_request}",
             f"{legend} {part}") for part in ("queue", "compute_input", "compute_infer",
                                              "compute_output")
        ]),
        ("Error rate by reason", "reqps", [
            (f"sum by (model, version, reason) ({rate('nv_inference_request_failure')})",
             f"{legend} {{{{reason}}}}"),
        ]),
        ("Failed fraction of requests", "percentunit", [
            (f"{by} ({rate('nv_inference_request_failure')}) / ({by} "
             f"({rate('nv_inference_request_failure')}) + {per_request})", legend),
        ]),
        ("Batch size (inferences per execution)", "short", [
            (f"{by} ({rate('nv_inference_count')}) / {by} ({rate('nv_inference_exec_count')})",
             legend),
        ]),
        ("Pending requests", "short", [
            (f"{by} (nv_inference_pending_request_count{{{m}}})", legend),
        ]),
        ("Request / queue / compute p99 (histograms)", "µs", [
            (f"histogram_quantile(0.99, sum by (model, version, le) "
             f"({rate(f'workbench_{part}_duration_us_bucket')}))", f"{legend} {part} p99")
            for part in ("request", "queue", "compute")
        ]),
        ("Formed batch size (per execution)", "short", [
            (f"histogram_quantile({q}, sum by (model, version, le) "
             f"({rate('workbench_batch_size_bucket')}))", f"{legend} p{name}")
            for q, name in (("0.5", "50"), ("0.99", "99"))
        ]),
        ("Batch fill and preferred hits", "percentunit", [
            (f"{by} ({rate('workbench_batch_fill_ratio_sum')}) / {by} "
             f"({rate('workbench_batch_fill_ratio_count')})", f"{legend} fill of max_batch_size"),
            (f"{by} ({rate('workbench_batch_preferred_executions_total')}) / {by} "
             f"({rate('nv_inference_exec_count')})", f"{legend} at a preferred size"),
        ]),
        ("Model ready (replicas ready)", "short", [
            (f"{by} (workbench_model_ready{{{m}}})", legend),
        ]),
        ("GPU utilisation", "percentunit", [
            (f"max by (instance, gpu_uuid) (nv_gpu_utilization{{{s}}})", "{{instance}} {{gpu_uuid}}"),
        ]),
        ("GPU memory", "bytes", [
            (f"max by (instance, gpu_uuid) (nv_gpu_memory_used_bytes{{{s}}})",
             "{{instance}} {{gpu_uuid}} used"),
            (f"max by (instance, gpu_uuid) (nv_gpu_memory_total_bytes{{{s}}})",
             "{{instance}} {{gpu_uuid}} total"),
        ]),
        ("CPU utilisation", "percentunit", [
            (f"max by (instance) (nv_cpu_utilization{{{s}}})", "{{instance}}"),
        ]),
        ("CPU memory used", "bytes", [
            (f"max by (instance) (nv_cpu_memory_used_bytes{{{s}}})", "{{instance}}"),
        ]),
        ("Servers up", "short", [(f"sum (up{{{s}}})", "up")]),
    ]


__all__ = ["DASHBOARD_FILE", "GPU_PANELS", "TEMPLATE_VARIABLES", "dashboard", "dashboard_text",
           "panel_queries", "substitute"]
