"""``workbench deploy`` puts the packages Python-backend models import into the image: their
model.py and helper modules are read (not run), installed packages pinned, unresolvable imports
warned about, and torch comes from the CPU wheel index (issue 16, item 7)."""

from __future__ import annotations

import importlib.metadata as metadata
import textwrap
from pathlib import Path

import pytest

from workbench.deploy import DeploySpec, python_requirements, render
from workbench.deploy.python_imports import imports_of
from workbench.hosts.cli import main

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_models" / "repository"


def python_model(repository: Path, name: str, files: dict[str, str], config: str | None = None) -> None:
    """A Python-backend model ``name`` with ``files`` (relative to its version folder 1/)."""
    folder = repository / name
    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text(config or f'name: "{name}"\nbackend: "python"\n')
    for relative, text in files.items():
        path = folder / "1" / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


MODEL_PY = """\
    import json
    import numpy as np
    import triton_python_backend_utils as pb_utils
    from google.protobuf import text_format
    import helper
    import importlib

    try:
        import optional_speedup_pkg
    except ImportError:
        optional_speedup_pkg = None

    import not_installed_anywhere_pkg


    class TritonPythonModel:
        def initialize(self, args):
            self.linear = importlib.import_module("sklearn.linear_model")
"""
HELPER_PY = """\
    from pathlib import Path


    def read(path):
        import yaml  # inside a function: still the image's business

        from helpers_pkg.inner import VALUE
        return yaml.safe_load(Path(path).read_text()), VALUE
"""


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    repo = tmp_path / "models"
    python_model(repo, "reader", {"model.py": MODEL_PY, "helper.py": HELPER_PY,
                                  "helpers_pkg/__init__.py": "",
                                  "helpers_pkg/inner.py": "import json\nVALUE = json.dumps(1)\n"})
    return repo


def test_imports_of_model_and_helpers_resolve_to_pinned_distributions(repository: Path) -> None:
    found = python_requirements(repository)
    assert found.models == ["reader"]
    # yaml (a helper's function) and sklearn (import_module) are third-party; numpy and
    # protobuf are workbench's own dependencies; json, pathlib stdlib; helper(s) local
    assert found.packages == {"pyyaml": metadata.version("pyyaml"),
                              "scikit-learn": metadata.version("scikit-learn")}
    assert found.used_by == {"pyyaml": ["reader"], "scikit-learn": ["reader"]}
    assert not found.needs_torch
    # one warning: the required missing import (the optional one in try/except ImportError is not)
    [warning] = found.warnings
    assert "'not_installed_anywhere_pkg'" in warning and "reader/1/model.py line 13" in warning
    text = render(DeploySpec(), repository, found)
    assert text["requirements-models.txt"].splitlines()[-2:] == [
        f"pyyaml=={metadata.version('pyyaml')}  # reader",
        f"scikit-learn=={metadata.version('scikit-learn')}  # reader"]
    assert "# WARNING: model 'reader' imports 'not_installed_anywhere_pkg'" in text["requirements-models.txt"]
    assert "-r /tmp/requirements-models.txt" in text["Dockerfile"]
    assert "Check before building" in text["README.md"] and "not_installed_anywhere_pkg" in text["README.md"]
    assert "download.pytorch.org" not in text["Dockerfile"]  # no torch needed


def test_torch_comes_from_the_cpu_index_directly_or_through_a_package(tmp_path: Path) -> None:
    repo = tmp_path / "models"
    python_model(repo, "embedder", {"model.py": "import sentence_transformers\n"})
    found = python_requirements(repo)
    assert found.needs_torch  # sentence-transformers requires torch
    assert list(found.packages) == ["sentence-transformers"]
    python_model(repo, "scripted", {"model.py": "import torch.nn\n"})
    found = python_requirements(repo)
    assert "torch" not in found.packages and found.needs_torch
    dockerfile = render(DeploySpec(), repo, found)["Dockerfile"]
    cpu_step = 'else pip install --index-url "$TORCH_INDEX_URL" "torch=='
    assert "ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu" in dockerfile
    # before anything that could pull PyPI's CUDA torch
    assert dockerfile.index(cpu_step) < dockerfile.index("-r /tmp/requirements-models.txt")


def test_pytorch_models_get_a_cpu_torch_pinned_as_the_extra(tmp_path: Path) -> None:
    repo = tmp_path / "models"
    (repo / "scripted" / "1").mkdir(parents=True)
    (repo / "scripted" / "config.pbtxt").write_text('name: "scripted"\nplatform: "pytorch_libtorch"\n')
    (repo / "scripted" / "1" / "model.pt").write_bytes(b"")
    dockerfile = render(DeploySpec(), repo)["Dockerfile"]
    requires = metadata.requires("workbench")
    assert requires is not None  # the installed package's metadata lists its requirements
    pins = [r.partition(";")[0].replace(" ", "") for r in requires if r.startswith("torch") and "pytorch" in r]
    assert f'--index-url "$TORCH_INDEX_URL" "{pins[0]}"' in dockerfile
    assert dockerfile.index("$TORCH_INDEX_URL") < dockerfile.index('"$wheel[pytorch]"')


def test_unreadable_model_file_is_a_warning_not_a_crash(tmp_path: Path) -> None:
    repo = tmp_path / "models"
    python_model(repo, "broken", {"model.py": "def oops(:\n"})
    python_model(repo, "custom", {"entry.py": "import yaml\n"},
                 config='name: "custom"\nbackend: "python"\ndefault_model_filename: "entry.py"\n')
    found = python_requirements(repo)
    assert found.models == ["broken", "custom"] and list(found.packages) == ["pyyaml"]
    [warning] = found.warnings
    assert warning.startswith("model 'broken': cannot read the imports of broken/1/model.py")


def test_relative_and_dynamic_imports() -> None:
    sites = imports_of("from . import x\nfrom .y import z\n__import__('os.path')\n"
                       "import a.b, c\nfrom d.e import f\n", "m.py")
    assert [(s.module, s.line) for s in sites] == [("os.path", 3), ("a.b", 4), ("c", 4), ("d.e", 5)]


def test_cli_warns_about_unresolved_imports(tmp_path: Path, repository: Path, capsys) -> None:
    out = tmp_path / "deploy"
    assert main(["deploy", f"--model-repository={repository}", f"--out={out}"]) == 0
    captured = capsys.readouterr()
    assert "workbench deploy: warning: model 'reader' imports 'not_installed_anywhere_pkg'" in captured.err
    assert str(out / "requirements-models.txt") in captured.out
    assert (out / "models/reader/1/helpers_pkg/inner.py").is_file()


@pytest.mark.skipif(not (SAMPLES / "tokenizer" / "1" / "minilm_tokenization.py").is_file(),
                    reason="sample models not built (make models)")
def test_sample_repository_image_gets_tokenizers_and_a_cpu_torch() -> None:
    """The sample repository's tokenizer and token_streamer import tokenizers in their helper
    module (inside a function): without it the image crash-loops on them."""
    found = python_requirements(SAMPLES)
    assert found.warnings == []
    assert found.used_by["tokenizers"] == ["token_streamer", "tokenizer"]
    assert found.packages["tokenizers"] == metadata.version("tokenizers")
    files = render(DeploySpec(), SAMPLES, found)
    assert f"tokenizers=={metadata.version('tokenizers')}" in files["requirements-models.txt"]
    assert "--index-url \"$TORCH_INDEX_URL\"" in files["Dockerfile"]  # digits_torchscript
