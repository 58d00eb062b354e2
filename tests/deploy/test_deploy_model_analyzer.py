"""workbench.deploy.model_analyzer: the tritonserver-compatible launcher and the Model Analyzer
profile configuration (the real model-analyzer runs in tests/production/test_model_analyzer.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from workbench.deploy import yaml_text
from workbench.deploy.model_analyzer import launcher_script, profile_config


def test_launcher_passes_tritonserver_flags_through_unchanged(tmp_path: Path) -> None:
    launcher = tmp_path / "tritonserver"
    launcher.write_text(launcher_script(("printf", "%s|"), env={"PYTHONPATH": "/a b/c'd"}), encoding="utf-8")
    launcher.chmod(0o755)
    flags = ["--model-repository", "/models/with space", "--strict-model-config", "false", "--http-port=8000"]
    out = subprocess.run([str(launcher), *flags], capture_output=True, text=True, check=True).stdout
    assert out == "|".join(["serve", *flags]) + "|"
    env_probe = tmp_path / "env-probe"
    env_probe.write_text(launcher_script(("sh", "-c", 'printf %s "$PYTHONPATH"'), env={"PYTHONPATH": "/a b/c'd"}),
                         encoding="utf-8")
    env_probe.chmod(0o755)
    assert subprocess.run([str(env_probe)], capture_output=True, text=True, check=True).stdout == "/a b/c'd"


def test_profile_config_is_cpu_only_and_reads_back_as_yaml() -> None:
    config = profile_config(["digits_mlp", "minilm_encoder"], "/models", launch_mode="local",
                            server_path="/opt/tritonserver", export_path="/out", max_batch_size=4,
                            perf_analyzer_flags={"stability-percentage": 50})
    loaded = yaml.safe_load(yaml_text.dump(config))
    assert loaded == config
    assert loaded["profile_models"] == {"digits_mlp": {"cpu_only": True}, "minilm_encoder": {"cpu_only": True}}
    assert loaded["triton_server_path"] == "/opt/tritonserver" and loaded["collect_cpu_metrics"] is True
    assert loaded["checkpoint_directory"] == "/out"
    assert loaded["run_config_search_max_model_batch_size"] == 4
    assert loaded["perf_analyzer_flags"] == {"stability-percentage": 50}
    remote = profile_config(["digits_mlp"], "/models")
    assert remote["triton_launch_mode"] == "remote" and "triton_server_path" not in remote


@pytest.mark.parametrize("kwargs", [{"launch_mode": "docker"}, {"launch_mode": "local"}])
def test_profile_config_refuses_what_it_cannot_run(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        profile_config(["digits_mlp"], "/models", **kwargs)
