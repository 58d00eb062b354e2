"""Version folders and version policies."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from workbench.config import parse_model_config, scan_version_dirs, select_versions


def _mkdirs(root: Path, *names: str) -> None:
    for name in names:
        (root / name).mkdir()


def test_scan_numeric_dirs_sorted(tmp_path: Path) -> None:
    _mkdirs(tmp_path, "10", "2", "1", "0")
    versions = scan_version_dirs(tmp_path)
    assert list(versions) == [0, 1, 2, 10]
    assert versions[10] == tmp_path / "10"


def test_scan_ignores_bad_names_with_triton_warnings(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _mkdirs(tmp_path, "3", "003", "abc", "-1", "1abc", "99999999999999999999")
    caplog.set_level(logging.WARNING, logger="workbench.config.versions")
    assert list(scan_version_dirs(tmp_path)) == [3]
    messages = [r.getMessage() for r in caplog.records]
    assert (
        "ignore version directory '003' which contains leading zeros in its directory name"
        in messages
    )
    for name in ("abc", "-1", "1abc", "99999999999999999999"):
        assert (
            f"ignore version directory '{name}' which fails to convert to integral number"
            in messages
        )
    assert all(r.levelno == logging.WARNING for r in caplog.records)


def test_scan_skips_special_hidden_and_files_silently(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _mkdirs(tmp_path, "1", "warmup", "initial_state", "configs", ".ipynb_checkpoints")
    (tmp_path / "5").write_text("not a folder")
    (tmp_path / "config.pbtxt").write_text("")
    caplog.set_level(logging.DEBUG)
    assert list(scan_version_dirs(tmp_path)) == [1]
    assert caplog.records == []


def test_scan_quiet_mode_and_missing_dir(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    _mkdirs(tmp_path, "abc", "7")
    caplog.set_level(logging.DEBUG)
    assert list(scan_version_dirs(tmp_path, warn=False)) == [7]
    assert caplog.records == []
    assert scan_version_dirs(tmp_path / "absent") == {}


@pytest.mark.parametrize(
    ("policy", "available", "expected"),
    [
        ("", [3, 1, 2], [3]),
        ("version_policy { latest { num_versions: 2 } }", [1, 2, 3], [2, 3]),
        ("version_policy { latest { num_versions: 5 } }", [2, 1], [1, 2]),
        ("version_policy { latest { num_versions: 0 } }", [1, 2], []),
        ("version_policy { all {} }", [3, 1, 2, 2], [1, 2, 3]),
        ("version_policy { specific { versions: [3, 1] } }", [1, 2, 3], [1, 3]),
        ("version_policy { specific { versions: [1, 1] } }", [1], [1]),
        ("", [], []),
        ("version_policy { all {} }", [], []),
    ],
)
def test_select_versions(policy: str, available: list[int], expected: list[int]) -> None:
    config = parse_model_config(f'name: "m" {policy}')
    assert select_versions(config, available) == expected


def test_select_specific_missing_logs_triton_error(caplog: pytest.LogCaptureFixture) -> None:
    config = parse_model_config('name: "m" version_policy { specific { versions: [1, 4] } }')
    caplog.set_level(logging.ERROR, logger="workbench.config.versions")
    assert select_versions(config, iter([1, 2])) == [1]
    assert [r.getMessage() for r in caplog.records] == [
        "version 4 is specified for model 'm', but the version directory is not present"
    ]


def test_scan_then_select(tmp_path: Path) -> None:
    _mkdirs(tmp_path, "1", "2", "10")
    config = parse_model_config('name: "m" version_policy { latest { num_versions: 2 } }')
    assert select_versions(config, scan_version_dirs(tmp_path)) == [2, 10]
