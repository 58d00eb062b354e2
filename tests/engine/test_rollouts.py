"""Rollouts inside the server (``server.rollouts``): the weighted and sticky split, the mirror
(cap, shed, candidate errors, agreement), promote and rollback, on a fake model with two
versions side by side."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import numpy as np
import pytest

from workbench import InvalidArgument, ModelNotFound, NotFound, Server, ServerOptions, Unsupported
from workbench.messages.types import InferenceRequest, Tensor
from workbench.testing.fake_backend import BEHAVIOUR, FAKE_CONFIG, fake_request, write_backend_model
from workbench.testing.version_load import VersionLoad
from workbench.testing.waits import until

pytestmark = pytest.mark.usefixtures("fake_backend")


def two_versions(repo: Path, policy: str = "all { }") -> Path:
    """``ab``: a fake model with versions 1 and 2 both served (``version_policy: all``)."""
    config = FAKE_CONFIG.format(name="ab", count=1, group="") + f"version_policy: {{ {policy} }}\n"
    folder = write_backend_model(repo, "ab", config)
    (folder / "2").mkdir()
    return folder


async def versions_ran(server: Server, requests: list) -> dict[str, int]:
    answers = await asyncio.gather(*(server.infer(r) for r in requests))
    counts: dict[str, int] = {}
    for answer in answers:
        counts[answer.model_version] = counts.get(answer.model_version, 0) + 1
    return counts


async def inference_counts(server: Server) -> dict[str, int]:
    report = await server.statistics("ab")
    return {s["version"]: s["inference_count"] for s in report["model_stats"]}


async def test_split_by_weight_counted_on_the_version_that_ran(tmp_path: Path) -> None:
    two_versions(tmp_path)
    async with Server(ServerOptions(model_repository=[str(tmp_path)])) as server:
        assert await versions_ran(server, [fake_request("ab")] * 10) == {"2": 10}  # latest READY
        await server.rollouts.set("ab", {1: 3, "2": 1})
        counts = await versions_ran(server, [fake_request("ab", float(i)) for i in range(400)])
        assert 240 <= counts["1"] <= 360 and counts["1"] + counts["2"] == 400, counts
        assert await inference_counts(server) == {"1": counts["1"], "2": 10 + counts["2"]}
        report = await server.rollouts.get("ab")
        assert report["routed"] == {"1": counts["1"], "2": counts["2"]}
        assert report["rollout"]["weights"] == {"1": 3.0, "2": 1.0}
        # a request naming a version is never redirected
        await server.rollouts.set("ab", {2: 1})
        assert await versions_ran(server, [fake_request("ab", version="1")] * 5) == {"1": 5}
        await server.rollouts.set("ab", {1: 1})
        assert await versions_ran(server, [fake_request("ab", version="-1")] * 5) == {"1": 5}
        await server.rollouts.clear("ab")
        assert await versions_ran(server, [fake_request("ab")] * 5) == {"2": 5}
        assert (await server.rollouts.get("ab"))["rollout"] is None


async def test_sticky_split_keeps_a_key_on_one_version(tmp_path: Path) -> None:
    two_versions(tmp_path)
    async with Server(ServerOptions(model_repository=[str(tmp_path)])) as server:
        await server.rollouts.set("ab", {1: 1, 2: 1}, sticky="user")
        chosen: dict[str, set[str]] = {}
        for user in range(40):
            requests = [fake_request("ab") for _ in range(5)]
            for request in requests:
                request.parameters["user"] = f"user-{user}"
            chosen[f"user-{user}"] = set(await versions_ran(server, requests))
        assert all(len(versions) == 1 for versions in chosen.values()), chosen
        assert set().union(*chosen.values()) == {"1", "2"}


async def test_rollouts_refuse_what_the_model_does_not_have(tmp_path: Path) -> None:
    two_versions(tmp_path)
    async with Server(ServerOptions(model_repository=[str(tmp_path)])) as server:
        with pytest.raises(InvalidArgument, match=r"names unknown version 3 \(known: 1, 2\)"):
            await server.rollouts.set("ab", {1: 1, 3: 1})
        with pytest.raises(InvalidArgument, match="unknown version 7"):
            await server.rollouts.set("ab", candidate=7, mirror_percent=10)
        for bad in ({1: -1}, {1: 0, 2: 0}, {"x": 1}, {1: float("nan")}, {1: "9"}):
            with pytest.raises(InvalidArgument):
                await server.rollouts.set("ab", bad)
        with pytest.raises(InvalidArgument, match="from 0 to 100"):
            await server.rollouts.set("ab", candidate=2, mirror_percent=101)
        with pytest.raises(InvalidArgument, match="needs a candidate"):
            await server.rollouts.set("ab", mirror_percent=5)
        with pytest.raises(ModelNotFound):
            await server.rollouts.set("nope", {1: 1})
        with pytest.raises(Unsupported, match="model-control-mode"):
            await server.rollouts.promote("ab", 2)
        assert (await server.rollouts.get("ab"))["rollout"] is None  # nothing was set
        assert await versions_ran(server, [fake_request("ab")]) == {"2": 1}


async def test_mirror_runs_copies_on_the_candidate_and_reports_agreement(tmp_path: Path) -> None:
    two_versions(tmp_path)
    async with Server(ServerOptions(model_repository=[str(tmp_path)])) as server:
        await server.rollouts.set("ab", {1: 1}, candidate=2, mirror_percent=100, mirror_max_in_flight=64)
        for value in range(20):  # one at a time: the primary is never busy, nothing is shed
            answer = await server.infer(fake_request("ab", float(value)))
            assert answer.model_version == "1"  # the client sees the primary's answers only
        await server.rollouts.settle("ab")
        mirror = (await server.rollouts.get("ab"))["mirror"]
        assert (mirror["mirrored"], mirror["shed"], mirror["candidate_errors"]) == (20, 0, 0)
        assert mirror["agreement"] == {"OUTPUT0": {"metric": "exact", "rows": 20, "agreement": 1.0,
                                                   "max_abs_diff": 0.0}}
        assert mirror["latency_us"]["primary"]["p99"] > 0 and mirror["latency_us"]["candidate"]["p99"] > 0
        assert await inference_counts(server) == {"1": 20, "2": 20}  # the candidate ran the copies
        # candidate failures never reach the client
        BEHAVIOUR.error_versions.add("2")
        for _ in range(5):
            assert (await server.infer(fake_request("ab"))).model_version == "1"
        await server.rollouts.settle("ab")
        mirror = (await server.rollouts.get("ab"))["mirror"]
        assert mirror["candidate_errors"] == 5 and "fake error of version 2" in mirror["last_error"]


async def test_mirror_is_capped_shed_and_never_delays_the_primary(tmp_path: Path) -> None:
    two_versions(tmp_path)
    async with Server(ServerOptions(model_repository=[str(tmp_path)])) as server:
        await server.rollouts.set("ab", {1: 1}, candidate=2, mirror_percent=100, mirror_max_in_flight=2)
        BEHAVIOUR.held_versions.add("2")
        BEHAVIOUR.release.clear()  # the candidate's executions wait: mirrored copies stay in flight
        for value in range(10):  # each primary is answered while its copies are held
            answer = await server.infer(fake_request("ab", float(value)))
            assert answer.model_version == "1"
        mirror = (await server.rollouts.get("ab"))["mirror"]
        assert (mirror["in_flight"], mirror["shed"], mirror["mirrored"]) == (2, 8, 0)
        BEHAVIOUR.release.set()
        await server.rollouts.settle("ab")
        mirror = (await server.rollouts.get("ab"))["mirror"]
        assert (mirror["in_flight"], mirror["shed"], mirror["mirrored"]) == (0, 8, 2)


async def test_mirror_sheds_while_the_primary_version_is_busy(tmp_path: Path) -> None:
    two_versions(tmp_path)
    async with Server(ServerOptions(model_repository=[str(tmp_path)])) as server:
        await server.rollouts.set("ab", {1: 1}, candidate=2, mirror_percent=100, mirror_max_in_flight=64)
        primary = server.lifecycle.resolve("ab", "1").scheduler
        BEHAVIOUR.held_versions.add("1")
        BEHAVIOUR.release.clear()
        requests = [asyncio.ensure_future(server.infer(fake_request("ab", float(v)))) for v in range(3)]
        await until(lambda: primary.inflight_count() == 3, "3 primary requests in flight")
        BEHAVIOUR.release.set()
        assert {(await r).model_version for r in requests} == {"1"}
        await server.rollouts.settle("ab")
        mirror = (await server.rollouts.get("ab"))["mirror"]
        assert mirror["shed"] >= 1 and mirror["shed"] + mirror["mirrored"] == 3, mirror


async def test_load_through_split_mirror_promote_and_rollback_fails_nothing(tmp_path: Path) -> None:
    folder = two_versions(tmp_path)
    before = (folder / "config.pbtxt").read_text()
    options = ServerOptions(model_repository=[str(tmp_path)], model_control_mode="explicit", load_model=["ab"])
    async with Server(options) as server:
        async def send(n: int) -> str:
            return (await server.infer(fake_request("ab", float(n)))).model_version

        load = VersionLoad(send)
        answered, more_answers = load.answered, load.more_answers
        await more_answers()
        await server.rollouts.set("ab", {1: 90, 2: 10})
        await more_answers()
        await server.rollouts.set("ab", {1: 90, 2: 10}, candidate=2, mirror_percent=50)
        await more_answers()
        promoted = await server.rollouts.promote("ab")
        assert promoted["promoted"] == 2 and promoted["config"]["reloaded"], promoted
        assert "specific" in (folder / "config.pbtxt").read_text()
        await more_answers()
        ran_after_promote = dict(answered)
        await more_answers()
        assert answered["1"] == ran_after_promote["1"]  # version 1 serves no more
        assert (await server.rollouts.get("ab"))["promoted"] == 2
        rolled = await server.rollouts.rollback("ab")
        assert rolled["config"]["reloaded"] and rolled["restored"]["candidate"] == 2, rolled
        assert (folder / "config.pbtxt").read_text() == before
        await more_answers()
        await load.stop()
        await server.rollouts.settle("ab")
        assert load.failures == [] and load.total() == load.sent, (load.failures[:3], answered, load.sent)
        assert answered["1"] > ran_after_promote["1"]  # the split is back after the rollback
        with pytest.raises(NotFound, match="no promote"):
            await server.rollouts.rollback("ab")
        assert (await server.rollouts.get("ab"))["mirror"]["candidate_errors"] == 0


def test_agreement_metric_per_output() -> None:
    from workbench.engine.rollout.agreement import OutputAgreement, metric_for

    scores = np.array([[0.1, 0.9], [0.8, 0.2]], np.float32)
    assert metric_for(Tensor("P", "FP32", scores)) == "argmax"
    classes = OutputAgreement("argmax")
    classes.add(scores, np.array([[0.2, 0.8], [0.1, 0.9]], np.float32))
    assert classes.report() == {"metric": "argmax", "rows": 2, "agreement": 0.5,
                                "max_abs_diff": pytest.approx(0.7)}
    embedding = np.ones((3, 384), np.float32)
    assert metric_for(Tensor("E", "FP32", embedding)) == "cosine"
    near = OutputAgreement("cosine")
    other = embedding.copy()
    other[2] = -1
    near.add(embedding, other)
    report = near.report()
    assert report["agreement"] == pytest.approx(2 / 3) and report["cosine_mean"] == pytest.approx(1 / 3)
    labels = np.array([[b"a"], [b"b"]], object)
    assert metric_for(Tensor("L", "BYTES", labels)) == "exact"
    exact = OutputAgreement("exact")
    exact.add(labels, np.array([[b"a"], [b"c"]], object))
    exact.add(labels, np.array([[b"a"]], object))  # another shape: both rows disagree
    assert (exact.report()["rows"], exact.report()["agreement"]) == (4, 0.25)


async def test_digits_versions_disagree_on_a_few_digits(sample_repository: Path, tmp_path: Path) -> None:
    """The sample's v1 (hidden 32) and v2 (hidden 64) differ in accuracy: the mirror's argmax
    agreement over the whole digits set says how often (below 1, above 0.95)."""
    from sklearn.datasets import load_digits

    shutil.copytree(sample_repository / "digits_mlp", tmp_path / "digits_mlp")
    pixels = load_digits().data.astype(np.float32)
    async with Server(ServerOptions(model_repository=[str(tmp_path)])) as server:
        await server.rollouts.set("digits_mlp", {1: 1}, candidate=2, mirror_percent=100)
        for start in range(0, len(pixels), 64):
            batch = pixels[start:start + 64]
            answer = await server.infer(InferenceRequest("digits_mlp", [Tensor("pixels", "FP32", batch)]))
            assert answer.model_version == "1" and answer.outputs[0].data.shape == (len(batch), 10)
            await server.rollouts.settle("digits_mlp")
        logits = (await server.rollouts.get("digits_mlp"))["mirror"]["agreement"]["logits"]
    assert logits["metric"] == "argmax" and logits["rows"] == len(pixels)
    assert 0.95 < logits["agreement"] < 1, logits


async def test_minilm_int8_version_mirrors_with_cosine_agreement(sample_repository: Path) -> None:
    """The sample's minilm_encoder v2 (INT8 weights) loads beside v1 for a rollout without
    moving unversioned traffic (pinned first), and the mirror reports its embeddings' cosine
    agreement with v1's on real sentences: close, not equal (some below the 0.99 threshold)."""
    from google.protobuf import json_format
    from tokenizers import Tokenizer

    from workbench.testing.sentences import SENTENCES

    folder = sample_repository / "minilm_encoder"
    if not (folder / "2" / "model.onnx").is_file():
        pytest.skip("the sample minilm_encoder has no version 2 (built before build_minilm_versions.py)")
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tokenizer.enable_truncation(max_length=256)  # sentence-transformers' max_seq_length
    tokenizer.no_padding()  # tokenizer.json pads to 128: one sentence a request, unpadded
    options = ServerOptions(model_repository=[str(sample_repository)], model_control_mode="explicit",
                            load_model=["minilm_encoder"])
    async with Server(options) as server:
        assert server.lifecycle.models["minilm_encoder"].ready_versions() == [1]  # the policy: v1 serves
        await server.rollouts.set("minilm_encoder", {1: 1})  # pin unversioned traffic, then load v2
        config = json_format.MessageToDict(await server.model_config("minilm_encoder"))
        config["version_policy"] = {"specific": {"versions": [1, 2]}}
        await server.load_model("minilm_encoder", config=config)
        assert server.lifecycle.models["minilm_encoder"].ready_versions() == [1, 2]
        await server.rollouts.set("minilm_encoder", {1: 1}, candidate=2, mirror_percent=100)
        for sentence in SENTENCES:
            tokens = tokenizer.encode(sentence)
            inputs = [Tensor(name, "INT64", np.array([values], np.int64)) for name, values in (
                ("input_ids", tokens.ids), ("attention_mask", tokens.attention_mask),
                ("token_type_ids", tokens.type_ids))]
            answer = await server.infer(InferenceRequest("minilm_encoder", inputs))
            assert answer.model_version == "1"
            await server.rollouts.settle("minilm_encoder")
        mirror = (await server.rollouts.get("minilm_encoder"))["mirror"]
    embedding = mirror["agreement"]["sentence_embedding"]
    assert (mirror["mirrored"], mirror["candidate_errors"]) == (len(SENTENCES), 0), mirror
    assert embedding["metric"] == "cosine" and embedding["rows"] == len(SENTENCES)
    # measured: cosine mean 0.992, 76 % of the sentences at cosine >= 0.99, max |diff| 0.03
    assert 0.97 < embedding["cosine_mean"] < 1 and 0.3 < embedding["agreement"] < 1, embedding
    assert 0 < embedding["max_abs_diff"] < 0.2, embedding


async def test_a_version_not_ready_gets_no_traffic(tmp_path: Path) -> None:
    folder = two_versions(tmp_path)
    options = ServerOptions(model_repository=[str(tmp_path)], model_control_mode="explicit", load_model=["ab"])
    async with Server(options) as server:
        await server.rollouts.set("ab", {1: 1, 2: 1})
        assert set(await versions_ran(server, [fake_request("ab")] * 40)) == {"1", "2"}
        text = (folder / "config.pbtxt").read_text().replace("all { }", "specific { versions: [2] }")
        assert (await server.config_files.write_model_config("ab", text))["reloaded"]
        assert server.lifecycle.models["ab"].versions[1].state.name != "READY"
        assert await versions_ran(server, [fake_request("ab")] * 20) == {"2": 20}  # 1's weight went to 2
        await server.rollouts.set("ab", {1: 1})  # only a version not READY: the latest READY serves
        assert await versions_ran(server, [fake_request("ab")] * 5) == {"2": 5}
