"""What NVIDIA's Triton Model Analyzer (``pip install triton-model-analyzer``) needs to profile
models on ``workbench serve``, CPU only: a tritonserver-compatible launcher for its ``local`` mode
and a ``model-analyzer profile -f`` configuration.

Model Analyzer drives a server through the v2 API it uses with the real tritonserver: it starts
one (``local`` mode: ``--triton-server-path`` with tritonserver's flags, ``--model-repository X
--model-control-mode explicit --http-port N --grpc-port N --metrics-port N --metrics-interval-ms N
--strict-model-config false``) or talks to a running one (``remote`` mode), loads each candidate
configuration with ``load_model(name, config=<JSON>)`` (explicit model control, the repository
extension's config override), waits for readiness, and measures with perf_analyzer (which reads
the statistics extension for the server-side queue/compute split). Local mode also reads the
server process's memory (psutil on the launcher's process id: the launcher must ``exec``).

Without a GPU, each model is marked ``cpu_only`` (Model Analyzer then proposes ``KIND_CPU``
instance groups; in remote mode it cannot tell and would propose ``KIND_GPU``, which the server
refuses) and the GPU columns (``gpu_used_memory``, ``gpu_utilization``, ``gpu_power_usage``: DCGM
in local mode, ``nv_gpu_*`` metrics in remote mode) stay empty.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence

#: the inference-table columns written to ``results/metrics-model-inference.csv``; Model
#: Analyzer's defaults plus the server's memory (``cpu_used_ram``, MB; local mode only)
INFERENCE_FIELDS = ("model_name", "batch_size", "concurrency", "model_config_path", "instance_group",
                    "max_batch_size", "satisfies_constraints", "perf_throughput", "perf_latency_p99",
                    "perf_server_queue", "perf_server_compute_infer", "cpu_used_ram")


def launcher_script(command: Sequence[str] = ("workbench",), env: Mapping[str, str] | None = None) -> str:
    """A ``/bin/sh`` script that behaves as ``tritonserver`` for Model Analyzer's local mode
    (``--triton-server-path``): it ``exec``s ``COMMAND serve "$@"``, so tritonserver's flags pass
    through unchanged and the process Model Analyzer started is the server itself.

    Args:
        command: the ``workbench`` executable (and any arguments before ``serve``), e.g.
            ``("/opt/venv/bin/python", "-m", "workbench.hosts.cli")``.
        env: variables exported first (e.g. ``PYTHONPATH``).

    Returns:
        The script's text (make the file executable).
    """
    lines = ["#!/bin/sh", "# tritonserver-compatible launcher of `workbench serve` for Triton Model Analyzer",
             "# (model-analyzer profile --triton-launch-mode=local --triton-server-path=<this file>)"]
    lines += [f"export {name}={shlex.quote(value)}" for name, value in (env or {}).items()]
    lines.append(f'exec {" ".join(shlex.quote(part) for part in command)} serve "$@"')
    return "\n".join(lines) + "\n"


def profile_config(models: Sequence[str], model_repository: str, *, launch_mode: str = "remote",
                   http_endpoint: str = "localhost:8000", grpc_endpoint: str = "localhost:8001",
                   metrics_url: str = "http://localhost:8002/metrics", server_path: str | None = None,
                   export_path: str = "model-analyzer-results",
                   output_model_repository: str = "model-analyzer-results/output-repository",
                   max_concurrency: int = 16, max_instance_count: int = 2, max_batch_size: int = 16,
                   perf_analyzer_path: str = "perf_analyzer",
                   perf_analyzer_flags: Mapping[str, object] | None = None) -> dict[str, object]:
    """A ``model-analyzer profile -f FILE`` configuration (the YAML's mapping) that profiles
    ``models`` on CPUs: each model ``cpu_only``, a brute-force search over ``KIND_CPU`` instance
    counts 1..``max_instance_count``, max batch sizes 1..``max_batch_size`` (powers of two) with
    dynamic batching, and concurrencies 1..``max_concurrency``.

    Args:
        models: model names of ``model_repository``.
        model_repository: the repository path (Model Analyzer reads each model's config there).
        launch_mode: ``"remote"`` (a running ``workbench serve --model-control-mode=explicit``)
            or ``"local"`` (Model Analyzer starts ``server_path``, a :func:`launcher_script`).
        http_endpoint, grpc_endpoint: ``host:port``; in local mode only the ports are used.
        metrics_url: the Prometheus endpoint (``/metrics``).
        export_path: where the reports, plots and CSV files go (``reports/summaries/<model>/``,
            ``results/*.csv``), and Model Analyzer's checkpoint (``0.ckpt``).
        output_model_repository: where Model Analyzer writes the candidate configurations
            (replaced on each run).
        perf_analyzer_flags: extra perf_analyzer flags (names without ``--``).

    Raises:
        ValueError: an unknown ``launch_mode``, or local mode without ``server_path``.
    """
    if launch_mode not in ("remote", "local"):
        raise ValueError(f"launch_mode must be 'remote' or 'local', got {launch_mode!r}")
    if launch_mode == "local" and not server_path:
        raise ValueError("local launch mode needs server_path (a launcher_script file)")
    config: dict[str, object] = {
        "model_repository": model_repository,
        "triton_launch_mode": launch_mode,
        "triton_http_endpoint": http_endpoint,
        "triton_grpc_endpoint": grpc_endpoint,
        "triton_metrics_url": metrics_url,
        "export_path": export_path,
        # its measurements (0.ckpt): a later run with the same folder reuses them instead of
        # measuring. The export folder itself: Model Analyzer makes that one, not a subfolder.
        "checkpoint_directory": export_path,
        "output_model_repository_path": output_model_repository,
        "override_output_model_repository": True,
        "perf_analyzer_path": perf_analyzer_path,
        "run_config_search_max_concurrency": max_concurrency,
        "run_config_search_max_instance_count": max_instance_count,
        "run_config_search_max_model_batch_size": max_batch_size,
        "inference_output_fields": list(INFERENCE_FIELDS),
        "profile_models": {name: {"cpu_only": True} for name in models},
    }
    if launch_mode == "local":
        config["triton_server_path"] = server_path
        config["collect_cpu_metrics"] = True
    if perf_analyzer_flags:
        config["perf_analyzer_flags"] = dict(perf_analyzer_flags)
    return config
