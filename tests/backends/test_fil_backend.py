"""The fil backend (``backend: "fil"``) on real XGBoost, LightGBM and Treelite files, on CPU.

Unit level: each model_type and parameter combination served by a real in-process server and
compared with the library's own predict / predict_proba cast to float32 with ``np.array_equal``
(bit-equal), the dynamic batcher joining requests, and the load errors' texts. End to end: the
breast-cancer samples through tritonclient HTTP and gRPC against a real ``workbench serve``.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from workbench import InferenceRequest, Server, ServerOptions, Tensor
from workbench.messages.types import RequestedOutput

xgb = pytest.importorskip("xgboost")
lgb = pytest.importorskip("lightgbm")
treelite = pytest.importorskip("treelite")
import treelite.gtil  # noqa: E402, F811  # the submodule (importorskip gave the package)
from sklearn.datasets import load_breast_cancer, load_diabetes, load_iris  # noqa: E402
from sklearn.ensemble import GradientBoostingClassifier  # noqa: E402

CONFIG = """\
name: "{name}"
backend: "fil"
max_batch_size: {mbs}
input [ {{ name: "input__0" data_type: {in_type} dims: [ {in_dims} ] }} ]
output [ {{ name: "{out_name}" data_type: TYPE_FP32 dims: [ {out_dims} ] }}{shap} ]
instance_group [ {{ count: 1 kind: {kind} }} ]
dynamic_batching {{ max_queue_delay_microseconds: 20000 }}
{params}
"""


def write_fil(repo: Path, name: str, filename: str, write, params: dict[str, str], *,
              in_dims: str, out_dims: str, mbs: int = 64, in_type: str = "TYPE_FP32",
              out_name: str = "output__0", kind: str = "KIND_CPU", extra: str = "",
              shap_dims: str = "") -> None:
    """A fil model folder: ``config.pbtxt`` and ``1/<filename>`` written by ``write(path)``;
    with ``shap_dims`` a second output ``treeshap_output`` of those dims."""
    folder = repo / name
    (folder / "1").mkdir(parents=True)
    if write is not None:
        write(folder / "1" / filename)
    text = "".join(f'parameters {{ key: "{k}" value {{ string_value: "{v}" }} }}\n'
                   for k, v in params.items())
    (folder / "config.pbtxt").write_text(CONFIG.format(
        name=name, mbs=mbs, in_type=in_type, in_dims=in_dims, out_name=out_name,
        out_dims=out_dims, kind=kind, params=text,
        shap=(f', {{ name: "treeshap_output" data_type: TYPE_FP32 dims: [ {shap_dims} ] }}'
              if shap_dims else "")) + extra)


@dataclass
class Trained:
    """Small models of each library on real scikit-learn data, and the rows to predict."""

    x_bin: np.ndarray
    x_multi: np.ndarray
    x_reg: np.ndarray
    xgb_bin: Any
    xgb_multi: Any
    xgb_reg: Any
    lgb_bin: Any
    lgb_multi: Any
    lgb_reg: Any
    skl_bin: Any
    skl_multi: Any


@pytest.fixture(scope="module")
def trained() -> Trained:
    xb, yb = load_breast_cancer(return_X_y=True)
    xm, ym = load_iris(return_X_y=True)
    xr, yr = load_diabetes(return_X_y=True)
    xb, xm, xr = xb.astype(np.float32), xm.astype(np.float32), xr.astype(np.float32)
    common = {"n_estimators": 8, "max_depth": 3, "random_state": 0, "n_jobs": 1}
    lgb_common = {**common, "num_leaves": 7, "verbose": -1}
    return Trained(
        x_bin=xb[:40], x_multi=xm[::4], x_reg=xr[:40],
        xgb_bin=xgb.XGBClassifier(**common).fit(xb, yb),
        xgb_multi=xgb.XGBClassifier(**common).fit(xm, ym),
        xgb_reg=xgb.XGBRegressor(**common).fit(xr, yr),
        lgb_bin=lgb.LGBMClassifier(**lgb_common).fit(xb, yb),
        lgb_multi=lgb.LGBMClassifier(**lgb_common).fit(xm, ym),
        lgb_reg=lgb.LGBMRegressor(**lgb_common).fit(xr, yr),
        skl_bin=GradientBoostingClassifier(n_estimators=8, max_depth=2, random_state=0).fit(xb, yb),
        skl_multi=GradientBoostingClassifier(n_estimators=8, max_depth=2, random_state=0).fit(xm, ym),
    )


def save_booster(model, path: Path) -> None:
    """An xgboost model as ``path``: JSON / UBJSON by the suffix, else UBJSON bytes (the
    format xgboost writes for any other name, without its warning about it)."""
    if path.suffix in (".json", ".ubj"):
        model.get_booster().save_model(str(path))
    else:
        path.write_bytes(model.get_booster().save_raw("ubj"))


def _f32(a) -> np.ndarray:
    return np.asarray(a).astype(np.float32)


def _gtil(model) -> Callable[[np.ndarray], np.ndarray]:
    return lambda x: np.asarray(treelite.gtil.predict(model, x)).reshape(len(x), -1)


def _cases(t: Trained) -> list[tuple[str, str, str, Any, dict[str, str], str, np.ndarray, np.ndarray]]:
    """(model name, model_type, file, writer, params, output dims, rows, expected FP32 output)."""
    def booster(model):
        return lambda p: save_booster(model, p)

    def lgb_writer(model):
        return lambda p: model.booster_.save_model(str(p))

    def tl_writer(model):
        return lambda p: treelite.sklearn.import_model(model).serialize(str(p))

    clf, proba = {"is_classifier": "true"}, {"is_classifier": "true", "predict_proba": "true"}
    xb, xm, xr = t.x_bin, t.x_multi, t.x_reg
    skl_bin_p = _gtil(treelite.sklearn.import_model(t.skl_bin))(xb)
    skl_multi_p = _gtil(treelite.sklearn.import_model(t.skl_multi))(xm)
    xgb_p = t.xgb_bin.predict_proba(xb)
    return [
        # xgboost: JSON, UBJSON and the default type (xgboost.model, read by xgboost's own loader)
        ("xgb_json_class", "xgboost_json", "xgboost.json", booster(t.xgb_bin), clf, "1",
         xb, _f32(t.xgb_bin.predict(xb)).reshape(-1)),
        ("xgb_json_proba2", "xgboost_json", "xgboost.json", booster(t.xgb_bin), proba, "2",
         xb, _f32(xgb_p)),
        ("xgb_ubj_proba1", "xgboost_ubj", "xgboost.ubj", booster(t.xgb_bin), proba, "1",
         xb, _f32(xgb_p[:, 1])),
        ("xgb_threshold", "xgboost_ubj", "xgboost.ubj", booster(t.xgb_bin),
         {**clf, "threshold": "0.9"}, "1", xb, _f32(xgb_p[:, 1] > 0.9)),
        ("xgb_default_type", "", "xgboost.model", booster(t.xgb_bin), clf, "1",
         xb, _f32(t.xgb_bin.predict(xb)).reshape(-1)),
        ("xgb_multi_class", "xgboost_json", "xgboost.json", booster(t.xgb_multi), clf, "1",
         xm, _f32(t.xgb_multi.predict(xm)).reshape(-1)),
        ("xgb_multi_proba", "xgboost_json", "xgboost.json", booster(t.xgb_multi), proba, "3",
         xm, _f32(t.xgb_multi.predict_proba(xm))),
        ("xgb_regressor", "xgboost_json", "xgboost.json", booster(t.xgb_reg),
         {"is_classifier": "false"}, "1", xr, _f32(t.xgb_reg.predict(xr)).reshape(-1)),
        # lightgbm (float64 predictions: cast to float32 last)
        ("lgb_class", "lightgbm", "model.txt", lgb_writer(t.lgb_bin), clf, "1",
         xb, _f32(t.lgb_bin.predict(xb)).reshape(-1)),
        ("lgb_proba2", "lightgbm", "model.txt", lgb_writer(t.lgb_bin), proba, "2",
         xb, _f32(t.lgb_bin.predict_proba(xb))),
        ("lgb_proba1", "lightgbm", "model.txt", lgb_writer(t.lgb_bin), proba, "1",
         xb, _f32(t.lgb_bin.predict_proba(xb)[:, 1])),
        ("lgb_multi_proba", "lightgbm", "model.txt", lgb_writer(t.lgb_multi), proba, "3",
         xm, _f32(t.lgb_multi.predict_proba(xm))),
        ("lgb_multi_class", "lightgbm", "model.txt", lgb_writer(t.lgb_multi), clf, "1",
         xm, _f32(t.lgb_multi.predict(xm)).reshape(-1)),
        ("lgb_regressor", "lightgbm", "model.txt", lgb_writer(t.lgb_reg),
         {"is_classifier": "false"}, "1", xr, _f32(t.lgb_reg.predict(xr)).reshape(-1)),
        # scikit-learn through a Treelite checkpoint (GTIL is the library's predictor)
        ("skl_proba2", "treelite_checkpoint", "checkpoint.tl", tl_writer(t.skl_bin), proba, "2",
         xb, _f32(np.concatenate([1 - skl_bin_p, skl_bin_p], axis=1))),
        ("skl_class", "treelite_checkpoint", "checkpoint.tl", tl_writer(t.skl_bin), clf, "1",
         xb, _f32(t.skl_bin.predict(xb)).reshape(-1)),
        ("skl_multi_proba", "treelite_checkpoint", "checkpoint.tl", tl_writer(t.skl_multi), proba,
         "3", xm, _f32(skl_multi_p)),
        ("skl_multi_class", "treelite_checkpoint", "checkpoint.tl", tl_writer(t.skl_multi), clf,
         "1", xm, _f32(t.skl_multi.predict(xm)).reshape(-1)),
        # FIL's older parameter name, and the FIL GPU-layout hints (accepted, no effect)
        ("xgb_output_class", "xgboost_json", "xgboost.json", booster(t.xgb_bin),
         {"output_class": "true", "storage_type": "SPARSE", "algo": "TREE_REORG",
          "blocks_per_sm": "2", "threads_per_tree": "4", "use_experimental_optimizations": "true",
          "cpu_nthread": "1"}, "1", xb, _f32(t.xgb_bin.predict(xb)).reshape(-1)),
    ]


async def test_every_model_type_and_parameter_equals_the_library(tmp_path: Path, trained, caplog) -> None:
    cases = _cases(trained)
    for name, model_type, filename, writer, params, out_dims, x, _ in cases:
        full = {**params, **({"model_type": model_type} if model_type else {})}
        write_fil(tmp_path, name, filename, writer, full, in_dims=str(x.shape[1]), out_dims=out_dims)
    caplog.set_level(logging.INFO, logger="workbench.backends.fil")
    async with Server(ServerOptions(model_repository=[str(tmp_path)], exit_on_error=False)) as server:
        index = {row["name"]: row for row in await server.repository_index()}
        for name, *_, x, expected in cases:
            assert index[name]["state"] == "READY", index[name]
            response = await server.infer(InferenceRequest(name, [Tensor("input__0", "FP32", x)]))
            (output,) = response.outputs
            assert output.name == "output__0" and output.datatype == "FP32"
            assert output.data.shape == expected.shape, name
            assert np.array_equal(output.data, expected), name
            one = await server.infer(InferenceRequest(name, [Tensor("input__0", "FP32", x[:1])]))
            assert np.array_equal(one.outputs[0].data, expected[:1]), name
    hints = [r.getMessage() for r in caplog.records if "no effect" in r.getMessage()]
    assert len(hints) == 1 and "storage_type=SPARSE" in hints[0] and "xgb_output_class" in hints[0]


async def test_concurrent_requests_are_batched(tmp_path: Path, trained) -> None:
    write_fil(tmp_path, "lgb", "model.txt", lambda p: trained.lgb_bin.booster_.save_model(str(p)),
              {"model_type": "lightgbm", "is_classifier": "true", "predict_proba": "true"},
              in_dims="30", out_dims="2")
    expected = _f32(trained.lgb_bin.predict_proba(trained.x_bin))
    sizes = [1, 3, 2, 5, 1, 4]
    starts = np.cumsum([0, *sizes[:-1]])
    async with Server(ServerOptions(model_repository=[str(tmp_path)], exit_on_error=False)) as server:
        responses = await asyncio.gather(*(
            server.infer(InferenceRequest("lgb", [Tensor("input__0", "FP32", trained.x_bin[s : s + n])]))
            for s, n in zip(starts, sizes, strict=True)))
        stats = (await server.statistics("lgb"))["model_stats"][0]
    for s, n, response in zip(starts, sizes, responses, strict=True):
        assert np.array_equal(response.outputs[0].data, expected[s : s + n])
    assert stats["inference_count"] == sum(sizes)
    assert stats["execution_count"] < len(sizes)  # the dynamic batcher joined some requests


async def test_default_model_filename_and_max_batch_size_0(tmp_path: Path, trained) -> None:
    write_fil(tmp_path, "nobatch", "trees.bin", lambda p: save_booster(trained.xgb_bin, p),
        {"model_type": "xgboost_ubj", "is_classifier": "true", "predict_proba": "true"},
        in_dims="-1, 30", out_dims="-1, 2", mbs=0, extra='default_model_filename: "trees.bin"\n')
    async with Server(ServerOptions(model_repository=[str(tmp_path)], exit_on_error=False)) as server:
        response = await server.infer(InferenceRequest("nobatch", [Tensor("input__0", "FP32", trained.x_bin)]))
    assert np.array_equal(response.outputs[0].data, _f32(trained.xgb_bin.predict_proba(trained.x_bin)))


LOAD_ERRORS: list[tuple[dict[str, str | None], dict[str, str], str]] = [
    ({"model_type": "catboost"}, {},
     "catboost not recognized as a valid serialization format; the fil backend's model_type is one of"),
    ({"is_classifier": None}, {}, "needs the parameter 'is_classifier' (or the older 'output_class')"),
    ({"predict_proba": "yes"}, {}, "parameter 'predict_proba' must be \"true\" or \"false\", got \"yes\""),
    ({"threshold": "high"}, {}, "parameter 'threshold' must be a number, got \"high\""),
    ({}, {"in_dims": "29"}, "input 'input__0' has dims [29] but the model takes 30 features"),
    ({}, {"out_dims": "3"}, "output 'output__0' has dims [3] but the model returns binary-class "
                            "probabilities (predict_proba): dims must be [1] or [2]"),
    ({"predict_proba": "false"}, {}, "output 'output__0' has dims [2] but the model returns the class index"),
    ({}, {"in_type": "TYPE_FP64"}, "configuration expects datatype TYPE_FP64 for input 'input__0', "
                                   "the fil backend provides TYPE_FP32"),
    ({}, {"out_name": "probabilities"}, "takes an output named 'output__0' and optionally one named "
                                        "'treeshap_output', the model configuration has ['probabilities']"),
    ({}, {"out_name": "treeshap_output"}, "the model configuration has ['treeshap_output']"),
    ({}, {"shap_dims": "30"}, "output 'treeshap_output' has dims [30] but the model's SHAP values are "
                              "[31] (the features and the bias)"),
    ({}, {"kind": "KIND_GPU"}, "is KIND_GPU but the fil backend runs the tree libraries' CPU predictors"),
    ({"model_type": "lightgbm"}, {}, "model file not found: "),
    ({}, {"write": "not a model"}, "xgboost cannot read 'xgboost.json' as model_type 'xgboost_json'"),
]


async def test_load_errors_are_clear(tmp_path: Path, trained) -> None:
    for index, (params, io, _) in enumerate(LOAD_ERRORS):
        full: dict[str, str | None] = {"model_type": "xgboost_json", "is_classifier": "true",
                                       "predict_proba": "true", **params}
        kw = {"in_dims": "30", "out_dims": "2", **io}
        text = kw.pop("write", None)

        def writer(p: Path, text: str | None = text) -> None:
            if text is not None:
                p.write_text(text)
            else:
                trained.xgb_bin.get_booster().save_model(str(p))

        write_fil(tmp_path, f"bad{index}", "xgboost.json", writer,
                  {k: v for k, v in full.items() if v is not None}, **kw)  # type: ignore[arg-type]
    async with Server(ServerOptions(model_repository=[str(tmp_path)], exit_on_error=False)) as server:
        rows = {row["name"]: row for row in await server.repository_index()}
    for index, (_, _, reason) in enumerate(LOAD_ERRORS):
        row = rows[f"bad{index}"]
        assert row["state"] == "UNAVAILABLE", row
        assert reason in row["reason"], (index, row["reason"])
        assert row["reason"].startswith(f"unable to load model 'bad{index}'"), row["reason"]
        # the library's text, not its native stack (xgboost appends "Stack trace: [bt] (0) ...")
        assert "[bt]" not in row["reason"] and "Stack trace" not in row["reason"], row["reason"]


async def test_without_the_library_the_load_says_what_to_install(tmp_path: Path, trained, monkeypatch) -> None:
    write_fil(tmp_path, "lgb", "model.txt", lambda p: trained.lgb_bin.booster_.save_model(str(p)),
              {"model_type": "lightgbm", "is_classifier": "true"}, in_dims="30", out_dims="1")
    monkeypatch.setitem(sys.modules, "lightgbm", None)  # import lightgbm -> ImportError
    async with Server(ServerOptions(model_repository=[str(tmp_path)], exit_on_error=False)) as server:
        (row,) = await server.repository_index()
    assert row["state"] == "UNAVAILABLE"
    assert "needs the 'lightgbm' package for model_type 'lightgbm'" in row["reason"]
    assert "pip install lightgbm" in row["reason"]


async def test_wrong_feature_count_in_a_request_is_a_client_error(tmp_path: Path, trained) -> None:
    write_fil(tmp_path, "xgb", "xgboost.json", lambda p: trained.xgb_bin.get_booster().save_model(str(p)),
              {"model_type": "xgboost_json", "is_classifier": "true"}, in_dims="30", out_dims="1")
    from workbench.common.errors import InvalidArgument

    async with Server(ServerOptions(model_repository=[str(tmp_path)], exit_on_error=False)) as server:
        with pytest.raises(InvalidArgument):
            await server.infer(InferenceRequest("xgb", [Tensor("input__0", "FP32", np.zeros((2, 29), np.float32))]))
        ok = await server.infer(InferenceRequest("xgb", [Tensor("input__0", "FP32", trained.x_bin[:2])]))
    assert np.array_equal(ok.outputs[0].data, _f32(trained.xgb_bin.predict(trained.x_bin[:2])).reshape(-1))


# --- the samples end to end (tritonclient HTTP and gRPC against `workbench serve`) ------------------

SAMPLES = ("cancer_xgboost", "cancer_lightgbm", "cancer_sklearn")


@pytest.fixture(scope="module")
def fil_server(sample_repository: Path):
    """One `workbench serve` with only the three FIL samples loaded."""
    from workbench.testing.process import ServerProcess

    process = ServerProcess([f"--model-repository={sample_repository}", "--model-control-mode=explicit",
                             *(f"--load-model={m}" for m in SAMPLES)])
    yield process
    process.stop()


def _library_proba(model: str, x: np.ndarray, repo: Path) -> np.ndarray:
    """The library's own predict_proba of the sample's file, float32 (the reference)."""
    folder = repo / model / "1"
    if model == "cancer_xgboost":
        booster = xgb.Booster(model_file=str(folder / "xgboost.json"))
        p = booster.inplace_predict(x)
    elif model == "cancer_lightgbm":
        p = lgb.Booster(model_file=str(folder / "model.txt")).predict(x)
    else:
        p = np.asarray(treelite.gtil.predict(treelite.Model.deserialize(str(folder / "checkpoint.tl")), x)).ravel()
    return _f32(np.stack([1 - p, p], axis=1))


@pytest.mark.e2e
@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize("model", SAMPLES)
def test_samples_through_tritonclient(fil_server, sample_repository: Path, model: str, protocol: str) -> None:
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "sample_models"))
    from build_cancer_trees import MIN_ACCURACY, load_split

    _, x_test, _, y_test = load_split()
    module: Any = httpclient if protocol == "http" else grpcclient
    client = module.InferenceServerClient(fil_server.url if protocol == "http" else fil_server.grpc_url)
    try:
        assert client.is_model_ready(model)
        metadata = client.get_model_metadata(model)
        assert (metadata["platform"] if protocol == "http" else metadata.platform) == "fil"
        chunks = []
        for start in range(0, len(x_test), 64):
            rows = x_test[start : start + 64]
            tensor = module.InferInput("input__0", list(rows.shape), "FP32")
            tensor.set_data_from_numpy(rows)
            result = client.infer(model, [tensor], outputs=[module.InferRequestedOutput("output__0")])
            chunks.append(result.as_numpy("output__0"))
    finally:
        client.close()
    proba = np.concatenate(chunks)
    assert proba.dtype == np.float32 and proba.shape == (len(x_test), 2)
    assert np.array_equal(proba, _library_proba(model, x_test, sample_repository))
    assert float((proba.argmax(axis=1) == y_test).mean()) >= MIN_ACCURACY


@pytest.mark.e2e
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_classify_cancer_example(fil_server, protocol: str, capsys) -> None:
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "examples" / "classify_cancer.py"
    spec = importlib.util.spec_from_file_location("classify_cancer", path)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    url = fil_server.url if protocol == "http" else fil_server.grpc_url
    assert example.main(["--url", url, "--protocol", protocol]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == list(SAMPLES)
    assert all("on 143 held-out rows (ok" in line for line in lines), lines


def test_predictor_threads_default_leaves_two_cpus_and_the_config_wins(monkeypatch) -> None:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

    from workbench.backends import fil_options as fo

    def config(**params: str) -> ModelConfig:
        c = ModelConfig(name="m")
        for k, v in {"is_classifier": "true", **params}.items():
            c.parameters[k].string_value = v
        return c

    monkeypatch.setattr(fo.os, "sched_getaffinity", lambda pid: {0, 1})
    assert fo.fil_options(config()).cpu_nthread == 1  # 2 CPUs: one predictor thread
    monkeypatch.setattr(fo.os, "sched_getaffinity", lambda pid: set(range(16)))
    assert fo.fil_options(config()).cpu_nthread == 14
    assert fo.fil_options(config(cpu_nthread="-1")).cpu_nthread == -1  # FIL's "all cores"
    assert fo.fil_options(config(cpu_nthread="3")).cpu_nthread == 3


#: a config laid out as Triton fil_backend's own QA writes them (parameters as a list, no
#: count, KIND_CPU, a large max_batch_size, GPU-only layout keys)
FIL_QA_CONFIG = """name: "qa_layout"
backend: "fil"
max_batch_size: 8192
input [
 {
    name: "input__0"
    data_type: TYPE_FP32
    dims: [ 4 ]
  }
]
output [
 {
    name: "output__0"
    data_type: TYPE_FP32
    dims: [ 3 ]
  }
]
instance_group [{ kind: KIND_CPU }]
parameters [
  { key: "model_type" value: { string_value: "lightgbm" } },
  { key: "predict_proba" value: { string_value: "true" } },
  { key: "is_classifier" value: { string_value: "true" } },
  { key: "threshold" value: { string_value: "0.5" } },
  { key: "layout" value: { string_value: "depth_first" } },
  { key: "xgboost_allow_unknown_field" value: { string_value: "true" } }
]

dynamic_batching { }"""


async def test_a_config_in_fil_backends_own_layout_loads_unchanged(tmp_path: Path, trained) -> None:
    folder = tmp_path / "qa_layout"
    (folder / "1").mkdir(parents=True)
    trained.lgb_multi.booster_.save_model(str(folder / "1" / "model.txt"))
    (folder / "config.pbtxt").write_text(FIL_QA_CONFIG)
    options = ServerOptions(model_repository=[str(tmp_path)], exit_on_error=False, strict_model_config=True)
    async with Server(options) as server:
        response = await server.infer(InferenceRequest("qa_layout", [Tensor("input__0", "FP32", trained.x_multi)]))
    assert np.array_equal(response.outputs[0].data, _f32(trained.lgb_multi.predict_proba(trained.x_multi)))


def test_auto_complete_leaves_the_file_to_model_type(tmp_path: Path) -> None:
    """Triton's core detects no fil model from its files and fills no default_model_filename for
    ``backend: "fil"``: FIL takes the file name from model_type (else lightgbm's model.txt
    would be looked up as xgboost.model)."""
    from tritonclient.grpc.model_config_pb2 import ModelConfig

    from workbench import InvalidModelConfig
    from workbench.config import autocomplete_model_config

    (tmp_path / "trees" / "1").mkdir(parents=True)
    (tmp_path / "trees" / "1" / "model.txt").write_text("tree\n")
    completed = autocomplete_model_config(ModelConfig(backend="fil"), "trees", tmp_path / "trees")
    assert completed.backend == "fil" and completed.default_model_filename == "" and not completed.platform
    with pytest.raises(InvalidModelConfig, match="Could not determine backend"):
        autocomplete_model_config(None, "trees", tmp_path / "trees")


async def test_treeshap_output_is_the_librarys_own_shap(tmp_path: Path, trained) -> None:
    """FIL's optional ``treeshap_output``: xgboost ``pred_contribs`` / lightgbm ``pred_contrib``
    exactly, [n_features + 1] (binary) or [n_classes, n_features + 1]; only when requested."""
    t = trained
    proba = {"is_classifier": "true", "predict_proba": "true"}
    xgb_shap = lambda m, x: m.get_booster().predict(xgb.DMatrix(x), pred_contribs=True)  # noqa: E731
    cases = [
        ("xgb_bin", "xgboost_json", "xgboost.json", lambda p: save_booster(t.xgb_bin, p), "2", "31",
         t.x_bin, _f32(xgb_shap(t.xgb_bin, t.x_bin))),
        ("xgb_multi", "xgboost_json", "xgboost.json", lambda p: save_booster(t.xgb_multi, p), "3", "3, 5",
         t.x_multi, _f32(xgb_shap(t.xgb_multi, t.x_multi))),
        ("lgb_bin", "lightgbm", "model.txt", lambda p: t.lgb_bin.booster_.save_model(str(p)), "2", "31",
         t.x_bin, _f32(t.lgb_bin.booster_.predict(t.x_bin, pred_contrib=True))),
        ("lgb_multi", "lightgbm", "model.txt", lambda p: t.lgb_multi.booster_.save_model(str(p)), "3",
         "3, 5", t.x_multi, _f32(t.lgb_multi.booster_.predict(t.x_multi, pred_contrib=True)).reshape(-1, 3, 5)),
    ]
    for name, model_type, filename, writer, out_dims, shap_dims, x, _ in cases:
        write_fil(tmp_path, name, filename, writer, {**proba, "model_type": model_type},
                  in_dims=str(x.shape[1]), out_dims=out_dims, shap_dims=shap_dims)
    write_fil(tmp_path, "skl", "checkpoint.tl",
              lambda p: treelite.sklearn.import_model(t.skl_bin).serialize(str(p)),
              {**proba, "model_type": "treelite_checkpoint"}, in_dims="30", out_dims="2", shap_dims="31")
    async with Server(ServerOptions(model_repository=[str(tmp_path)], exit_on_error=False)) as server:
        rows = {row["name"]: row for row in await server.repository_index()}
        for name, *_, x, expected in cases:
            request = InferenceRequest(name, [Tensor("input__0", "FP32", x)])
            out = {o.name: o.data for o in (await server.infer(request)).outputs}
            assert set(out) == {"output__0", "treeshap_output"}, name
            assert out["treeshap_output"].shape == expected.shape, name
            assert np.array_equal(out["treeshap_output"], expected), name
            only = InferenceRequest(name, [Tensor("input__0", "FP32", x)], outputs=[RequestedOutput("output__0")])
            assert [o.name for o in (await server.infer(only)).outputs] == ["output__0"]
    assert rows["skl"]["state"] == "UNAVAILABLE"
    assert ("output 'treeshap_output' needs SHAP values, which model_type 'treelite_checkpoint' "
            "does not give") in rows["skl"]["reason"]


async def test_a_request_of_zero_rows_gets_empty_outputs(tmp_path: Path, trained) -> None:
    """A [0, n_features] request (a valid shape) was a 500: the libraries' [0]-row results did
    not reshape. Now empty outputs of the configured widths; the model keeps serving."""
    for name, model_type, filename, writer in (
            ("xgb", "xgboost_json", "xgboost.json", lambda p: save_booster(trained.xgb_bin, p)),
            ("lgb", "lightgbm", "model.txt", lambda p: trained.lgb_bin.booster_.save_model(str(p))),
            ("skl", "treelite_checkpoint", "checkpoint.tl",
             lambda p: treelite.sklearn.import_model(trained.skl_bin).serialize(str(p)))):
        write_fil(tmp_path, name, filename, writer, {"model_type": model_type, "is_classifier": "true",
                  "predict_proba": "true"}, in_dims="30", out_dims="2",
                  shap_dims="" if name == "skl" else "31")
    empty = np.zeros((0, 30), np.float32)
    async with Server(ServerOptions(model_repository=[str(tmp_path)], exit_on_error=False)) as server:
        for name in ("xgb", "lgb", "skl"):
            response = await server.infer(InferenceRequest(name, [Tensor("input__0", "FP32", empty)]))
            shapes = {o.name: o.data.shape for o in response.outputs}
            assert shapes == ({"output__0": (0, 2)} if name == "skl" else
                              {"output__0": (0, 2), "treeshap_output": (0, 31)}), name
            again = await server.infer(InferenceRequest(name, [Tensor("input__0", "FP32", trained.x_bin[:3])]))
            assert again.outputs[0].data.shape == (3, 2)
