"""The rollout extension over gRPC (``workbench.RolloutService``, Struct messages): a real
grpc.aio server and channel over a real engine, the service in the ``model-repository``
restricted group, and a split applied hot under concurrent gRPC ``ModelInfer`` calls."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from google.protobuf import json_format, struct_pb2
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

from workbench import Server, ServerOptions
from workbench.testing.fake_backend import FAKE_CONFIG, write_backend_model
from workbench.testing.version_load import VersionLoad

pytestmark = pytest.mark.usefixtures("fake_backend")

KEY = "r0ll-key"
ADMIN = (("triton-grpc-protocol-admin", KEY),)


def two_versions(repo: Path) -> Path:
    config = FAKE_CONFIG.format(name="ab", count=1, group="") + "version_policy: { all { } }\n"
    folder = write_backend_model(repo, "ab", config)
    (folder / "2").mkdir()
    return folder


def rollout_client(channel: grpc.aio.Channel) -> Callable[..., Any]:
    """``await call("Set", metadata, model=..., weights=...)`` -> the answer as a dict: what a
    client with grpcio and protobuf only writes (docs/rollouts.md, "Over gRPC")."""

    async def call(method: str, metadata: Any = ADMIN, **body: Any) -> dict[str, Any]:
        stub = channel.unary_unary(f"/workbench.RolloutService/{method}",
                                   request_serializer=struct_pb2.Struct.SerializeToString,
                                   response_deserializer=struct_pb2.Struct.FromString)
        reply = await stub(json_format.ParseDict(body, struct_pb2.Struct()), metadata=metadata)
        return json_format.MessageToDict(reply)

    return call


async def status_of(call: Any) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    return info.value


def infer_request(value: float) -> pb.ModelInferRequest:
    tensor = pb.ModelInferRequest.InferInputTensor(name="INPUT0", datatype="FP32", shape=[1, 1])
    return pb.ModelInferRequest(model_name="ab", inputs=[tensor],
                                raw_input_contents=[np.array([[value]], np.float32).tobytes()])


async def test_set_get_promote_rollback_clear_over_grpc(tmp_path: Path, grpc_serving) -> None:
    folder = two_versions(tmp_path)
    options = ServerOptions(model_repository=[str(tmp_path)], model_control_mode="explicit", load_model=["ab"])
    async with Server(options) as server, \
            grpc_serving(server, grpc_restricted_protocol=[f"model-repository:admin={KEY}"]) as port, \
            grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = rollout_client(channel)
        infer = service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer

        # the restricted group: Triton's code and text, nothing set
        for method in ("Set", "Get", "Promote"):
            refused = await status_of(call(method, (), model="ab", weights={"1": 1}))
            assert refused.code() == grpc.StatusCode.UNAVAILABLE
            assert refused.details() == "This protocol is restricted, expecting header 'triton-grpc-protocol-admin'"
        wrong = await status_of(call("Get", (("triton-grpc-protocol-admin", "no"),), model="ab"))
        assert wrong.code() == grpc.StatusCode.UNAVAILABLE
        assert server.rollouts.mirroring is False and (await server.rollouts.get("ab"))["rollout"] is None

        report = await call("Set", model="ab", weights={"1": 1}, candidate=2, mirror_percent=100)
        assert report["rollout"] == {"weights": {"1": 1.0}, "sticky": "", "candidate": 2.0,
                                     "mirror_percent": 100.0, "mirror_max_in_flight": 4.0}
        for value in range(3):
            assert (await infer(infer_request(float(value)))).model_version == "1"
        await server.rollouts.settle("ab")
        report = await call("Get", model="ab")
        assert report["routed"] == {"1": 3.0} and report["mirror"]["mirrored"] == 3
        assert report["mirror"]["agreement"]["OUTPUT0"]["agreement"] == 1.0

        promoted = await call("Promote", model="ab")
        assert promoted["promoted"] == 2 and promoted["config"]["reloaded"] is True, promoted
        assert (folder / "config.pbtxt.bak").exists()
        assert (await infer(infer_request(1.0))).model_version == "2"
        rolled = await call("Rollback", model="ab")
        assert rolled["restored"]["weights"] == {"1": 1.0} and rolled["config"]["reloaded"] is True
        assert (await infer(infer_request(1.0))).model_version == "1"
        again = await status_of(call("Rollback", model="ab"))
        assert again.code() == grpc.StatusCode.NOT_FOUND and "no promote" in again.details()

        assert await call("Clear", model="ab") == {}
        assert (await call("Get", model="ab"))["rollout"] is None
        assert (await infer(infer_request(1.0))).model_version == "2"  # the latest READY again


async def test_bad_rollouts_get_grpc_statuses(tmp_path: Path, grpc_serving) -> None:
    two_versions(tmp_path)
    async with Server(ServerOptions(model_repository=[str(tmp_path)])) as server, \
            grpc_serving(server) as port, grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = rollout_client(channel)
        cases: list[tuple[str, dict[str, Any], grpc.StatusCode, str]] = [
            ("Set", {"model": "ab", "weights": {"5": 1}}, grpc.StatusCode.INVALID_ARGUMENT, "unknown version 5"),
            ("Set", {"model": "ab", "weight": {"1": 1}}, grpc.StatusCode.INVALID_ARGUMENT,
             "unknown rollout field 'weight'"),
            ("Set", {"model": "ab", "candidate": 1.5, "mirror_percent": 5}, grpc.StatusCode.INVALID_ARGUMENT,
             "version number"),
            ("Set", {"model": "ab", "weights": {"1": -1}}, grpc.StatusCode.INVALID_ARGUMENT, "number >= 0"),
            ("Set", {"weights": {"1": 1}}, grpc.StatusCode.INVALID_ARGUMENT, "needs 'model'"),
            ("Get", {"model": "ab", "extra": 1}, grpc.StatusCode.INVALID_ARGUMENT, "unknown rollout field"),
            ("Get", {"model": "nope"}, grpc.StatusCode.NOT_FOUND, "'nope' is not found"),
            ("Promote", {"model": "ab", "version": 2}, grpc.StatusCode.UNIMPLEMENTED, "model-control-mode"),
        ]
        for method, body, code, text in cases:
            error = await status_of(call(method, (), **body))
            assert (error.code(), text in error.details()) == (code, True), (method, body, error.details())
        garbage = channel.unary_unary("/workbench.RolloutService/Set")  # bytes as they are
        error = await status_of(garbage(b"\xff\xff\xff"))
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert (await server.rollouts.get("ab"))["rollout"] is None  # nothing was set


async def test_split_applied_hot_under_concurrent_grpc_infers_fails_nothing(tmp_path: Path, grpc_serving) -> None:
    two_versions(tmp_path)
    async with Server(ServerOptions(model_repository=[str(tmp_path)])) as server, \
            grpc_serving(server) as port, grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = rollout_client(channel)
        infer = service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer

        async def send(n: int) -> str:
            return (await infer(infer_request(float(n)))).model_version

        load = VersionLoad(send)
        more_answers = load.more_answers
        assert set(await more_answers()) == {"2"}  # no rollout: the latest READY version
        await call("Set", (), model="ab", weights={"1": 1})
        await more_answers(8)  # requests in flight when it was set finish on the version they had
        assert set(await more_answers()) == {"1"}
        await call("Set", (), model="ab", weights={"1": 1, "2": 1}, candidate=2, mirror_percent=50)
        both = await more_answers(200)
        assert both.get("1", 0) > 0 and both.get("2", 0) > 0, both
        await call("Clear", (), model="ab")
        await more_answers(8)
        assert set(await more_answers()) == {"2"}
        await load.stop()
        await server.rollouts.settle("ab")
        assert load.failures == [] and load.total() == load.sent, (load.failures[:3], load.answered, load.sent)
