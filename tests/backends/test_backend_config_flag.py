"""``--backend-config``: tritonserver's ``<backend>,<setting>=<value>`` (or a backend-agnostic
``<setting>=<value>``). Settings this server has no use for (python's shm-default-byte-size,
stub-timeout-seconds, ...) are accepted with a warning, as Triton passes unknown settings to
its backends without failing; a malformed item exits with Triton's text."""

from __future__ import annotations

from pathlib import Path

import pytest

from workbench.hosts.cli import build_parser, options_from_args


def _options(tmp_path: Path, *items: str):
    args = build_parser().parse_args(
        ["serve", f"--model-repository={tmp_path}", *(f"--backend-config={i}" for i in items)])
    return options_from_args(args)


def test_python_and_unknown_settings_warn_and_start(tmp_path: Path, capsys) -> None:
    options = _options(tmp_path, "python,shm-default-byte-size=1048576",
                       "python,stub-timeout-seconds=30", "tensorflow,version=2", "onnxruntime,nope=1")
    assert options.default_max_batch_size == 4
    err = capsys.readouterr().err
    assert "warning: --backend-config 'python,shm-default-byte-size=1048576'" in err
    assert "onnxruntime,nope=1" in err


def test_default_max_batch_size_for_onnxruntime_or_every_backend(tmp_path: Path) -> None:
    assert _options(tmp_path, "onnxruntime,default-max-batch-size=8").default_max_batch_size == 8
    assert _options(tmp_path, "default-max-batch-size=2").default_max_batch_size == 2


@pytest.mark.parametrize("item", [",k=v", "python,k", "python,=v", "python,k="])
def test_malformed_items_exit_with_tritons_text(tmp_path: Path, item: str) -> None:
    with pytest.raises(SystemExit) as info:
        _options(tmp_path, item)
    assert "--backend-config option format is" in str(info.value)
