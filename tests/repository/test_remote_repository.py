"""Remote model repositories (``s3://``) against a real S3 API: moto's server on loopback,
files uploaded with boto3, the real Server serving the local mirror (s3fs through fsspec;
nothing of fsspec is mocked). Poll mode re-syncs on each poll, explicit mode on each load
(the model and the composing models it loads); the repository index lists the bucket live.
"""

from __future__ import annotations

import importlib.util
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("s3fs")
pytest.importorskip("moto.server")
boto3 = pytest.importorskip("boto3")

from moto.server import ThreadedMotoServer  # noqa: E402

from workbench import InferenceRequest, InvalidArgument, Server, ServerOptions, Tensor  # noqa: E402
from workbench.hosts.cli import build_parser, options_from_args  # noqa: E402
from workbench.repository.remote import MANIFEST, RemoteRepository  # noqa: E402
from workbench.testing.ensembles import ensemble_config  # noqa: E402
from workbench.testing.models import build_test_repository  # noqa: E402
from workbench.testing.reload import add_sub_config, add_sub_model_bytes  # noqa: E402


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    """``host:port`` of a moto S3 server on loopback (any free port)."""
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"{host}:{port}"
    server.stop()


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Triton's credential variables (moto accepts any); no endpoint from the environment."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)


class Bucket:
    """A fresh bucket on the moto server, written with boto3."""

    def __init__(self, endpoint: str) -> None:
        self.client = boto3.client("s3", endpoint_url=f"http://{endpoint}", region_name="us-east-1",
                                   aws_access_key_id="testing", aws_secret_access_key="testing")
        self.name = f"models-{uuid.uuid4().hex[:12]}"
        self.client.create_bucket(Bucket=self.name)

    def put(self, key: str, data: bytes | str) -> None:
        body = data.encode() if isinstance(data, str) else data
        self.client.put_object(Bucket=self.name, Key=key, Body=body)

    def upload_tree(self, folder: Path, prefix: str) -> None:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                self.put(f"{prefix}/{path.relative_to(folder).as_posix()}", path.read_bytes())

    def delete_prefix(self, prefix: str) -> None:
        listing = self.client.list_objects_v2(Bucket=self.name, Prefix=prefix)
        for item in listing.get("Contents", []):
            self.client.delete_object(Bucket=self.name, Key=item["Key"])


@pytest.fixture
def bucket(s3_endpoint: str, aws_env: None) -> Bucket:
    return Bucket(s3_endpoint)


@pytest.fixture
def remote_repo(bucket: Bucket, s3_endpoint: str, tmp_path: Path) -> str:
    """The test repository uploaded under ``repo/``; its URL in tritonserver's endpoint form."""
    bucket.upload_tree(build_test_repository(tmp_path / "source"), "repo")
    return f"s3://{s3_endpoint}/{bucket.name}/repo"


def options(url: str, cache: Path, **extra) -> ServerOptions:
    return ServerOptions(model_repository=[url], model_repository_cache=str(cache), **extra)


async def infer_add_sub(asgi_client, server: Server, name: str = "add_sub") -> dict:
    body = {"inputs": [
        {"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": [2.0] * 16},
        {"name": "INPUT1", "shape": [1, 16], "datatype": "FP32", "data": [1.0] * 16},
    ]}
    async with asgi_client(server) as http:
        response = await http.post(f"/v2/models/{name}/infer", json=body)
    assert response.status_code == 200, response.text
    outputs = {o["name"]: o["data"] for o in response.json()["outputs"]}
    assert outputs["OUTPUT0"] == [3.0] * 16 and outputs["OUTPUT1"] == [1.0] * 16
    return response.json()


async def index(server: Server) -> dict[str, set[tuple[str, str]]]:
    rows: dict[str, set[tuple[str, str]]] = {}
    for row in await server.repository_index():
        rows.setdefault(row["name"], set()).add((row.get("version", ""), row.get("state", "")))
    return rows


# ------------------------------------------------------------------ serving
async def test_serves_s3_repository_through_local_mirror(remote_repo, tmp_path, asgi_client) -> None:
    async with Server(options(remote_repo, tmp_path / "cache")) as server:
        await infer_add_sub(asgi_client, server)
        rows = await index(server)
        assert rows["versioned"] == {("1", "READY"), ("2", "READY"), ("3", "READY")}
        local = server.repository_manager.repository.paths[0]
        assert local.is_relative_to((tmp_path / "cache").resolve())
        assert (local / "add_sub" / "1" / "model.onnx").is_file() and (local / MANIFEST).is_file()


async def test_aws_endpoint_url_form(bucket, s3_endpoint, tmp_path, monkeypatch, asgi_client) -> None:
    bucket.upload_tree(build_test_repository(tmp_path / "source"), "deep/repo")
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://{s3_endpoint}")
    url = f"s3://{bucket.name}/deep/repo"
    async with Server(options(url, tmp_path / "cache")) as server:
        await infer_add_sub(asgi_client, server)


def test_resync_downloads_only_changes_and_survives_restart(remote_repo, bucket, tmp_path) -> None:
    first = RemoteRepository(remote_repo, tmp_path / "cache")
    synced = first.sync()
    assert "add_sub/config.pbtxt" in synced.downloaded and not synced.removed
    assert first.sync().downloaded == ()  # nothing changed
    bucket.put("repo/add_sub/config.pbtxt", add_sub_config("add_sub", 8, 1))
    bucket.delete_prefix("repo/fixed_shape/")
    again = RemoteRepository(remote_repo, tmp_path / "cache")  # a restart: manifest on disk
    result = again.sync()
    assert result.downloaded == ("add_sub/config.pbtxt",)
    assert set(result.removed) == {"fixed_shape/config.pbtxt", "fixed_shape/1/model.onnx"}
    assert not (again.local / "fixed_shape").exists()
    assert "count: 1" in (again.local / "add_sub" / "config.pbtxt").read_text()
    assert not [p for p in again.local.rglob(".wb-partial-*")]


# ------------------------------------------------------------------ poll mode
async def test_poll_applies_new_version_config_change_and_removal(
    remote_repo, bucket, tmp_path, asgi_client
) -> None:
    opts = options(remote_repo, tmp_path / "cache", model_control_mode="poll", repository_poll_secs=0)
    async with Server(opts) as server:
        assert ("1", "READY") in (await index(server))["add_sub"]

        bucket.put("repo/add_sub/2/model.onnx", add_sub_model_bytes(2))  # new version
        await server.poll_repository()
        result = await infer_add_sub(asgi_client, server)
        assert result["model_version"] == "2"
        assert ("2", "READY") in (await index(server))["add_sub"]

        bucket.put("repo/add_sub/config.pbtxt", add_sub_config("add_sub", 4, 1))  # config change
        await server.poll_repository()
        config = server.lifecycle.models["add_sub"].config
        assert config is not None and config.max_batch_size == 4
        await infer_add_sub(asgi_client, server)

        bucket.delete_prefix("repo/fixed_shape/")  # a model removed
        await server.poll_repository()
        assert "fixed_shape" not in await index(server)

        bucket.put("repo/added/config.pbtxt", add_sub_config("added", 8, 1))  # a model added
        bucket.put("repo/added/1/model.onnx", add_sub_model_bytes(0))
        await server.poll_repository()
        await infer_add_sub(asgi_client, server, "added")


# ------------------------------------------------------------------ explicit mode
async def test_explicit_load_resyncs_the_model_first(remote_repo, bucket, tmp_path, asgi_client) -> None:
    opts = options(remote_repo, tmp_path / "cache", model_control_mode="explicit", load_model=["add_sub"])
    async with Server(opts) as server:
        bucket.put("repo/late/config.pbtxt", add_sub_config("late", 8, 1))  # uploaded after start
        bucket.put("repo/late/1/model.onnx", add_sub_model_bytes(0))
        await server.load_model("late")
        await infer_add_sub(asgi_client, server, "late")

        bucket.put("repo/add_sub/3/model.onnx", add_sub_model_bytes(3))
        await server.load_model("add_sub")
        assert (await infer_add_sub(asgi_client, server))["model_version"] == "3"

        bucket.delete_prefix("repo/late/")
        with pytest.raises(InvalidArgument, match="failed to poll from model repository"):
            await server.load_model("late")


async def test_repository_index_lists_the_bucket_now(remote_repo, bucket, tmp_path, asgi_client) -> None:
    """As Triton's index lists the repository's folders on each call: models uploaded after
    start show (not loaded), models deleted from the bucket and never loaded do not."""
    opts = options(remote_repo, tmp_path / "cache", model_control_mode="explicit", load_model=["add_sub"])
    async with Server(opts) as server:
        names = {row["name"] for row in await server.repository_index()}
        assert {"add_sub", "fixed_shape"} <= names and "late" not in names
        bucket.put("repo/late/config.pbtxt", add_sub_config("late", 8, 1))
        bucket.put("repo/late/1/model.onnx", add_sub_model_bytes(0))
        bucket.delete_prefix("repo/fixed_shape/")
        rows = {row["name"]: row for row in await server.repository_index()}
        assert rows["late"] == {"name": "late"} and "fixed_shape" not in rows
        assert rows["add_sub"]["state"] == "READY"
        async with asgi_client(server) as http:
            listed = {r["name"] for r in (await http.post("/v2/repository/index")).json()}
        assert listed == set(rows)
        assert not (server.repository_manager.repository.paths[0] / "late").exists()  # listed, not downloaded


async def test_explicit_load_of_an_ensemble_syncs_its_new_composing_model(
    remote_repo, bucket, tmp_path
) -> None:
    opts = options(remote_repo, tmp_path / "cache", model_control_mode="explicit")
    async with Server(opts) as server:
        bucket.put("repo/late_add/config.pbtxt", add_sub_config("late_add", 8, 1))  # after start
        bucket.put("repo/late_add/1/model.onnx", add_sub_model_bytes(0))
        bucket.put("repo/ens_late/config.pbtxt", ensemble_config(
            "ens_late", [("IN0", "TYPE_FP32", [16]), ("IN1", "TYPE_FP32", [16])],
            [("SUM", "TYPE_FP32", [16])],
            [("late_add", {"INPUT0": "IN0", "INPUT1": "IN1"}, {"OUTPUT0": "SUM"})]))
        bucket.put("repo/ens_late/1/.keep", b"")  # S3 has no empty folders
        await server.load_model("ens_late")
        assert (await index(server))["late_add"] == {("1", "READY")}
        a = np.full((1, 16), 2.0, np.float32)
        response = await server.infer(InferenceRequest(
            "ens_late", [Tensor("IN0", "FP32", a), Tensor("IN1", "FP32", a)]))
        np.testing.assert_array_equal(response.outputs[0].data, a + a)


# ------------------------------------------------------------------ errors
async def test_missing_bucket_is_a_startup_error(s3_endpoint, aws_env, tmp_path) -> None:
    url = f"s3://{s3_endpoint}/no-such-bucket-{uuid.uuid4().hex[:8]}/repo"
    with pytest.raises(InvalidArgument, match="does not exist or is not a directory"):
        await Server(options(url, tmp_path / "cache")).start()


async def test_missing_path_in_bucket_is_a_startup_error(bucket, s3_endpoint, tmp_path) -> None:
    url = f"s3://{s3_endpoint}/{bucket.name}/nothing/here"
    with pytest.raises(InvalidArgument, match=f"model repository '{url}' does not exist"):
        await Server(options(url, tmp_path / "cache")).start()


@pytest.mark.parametrize(("url", "message"), [
    ("s3://", "no bucket or container"),
    ("ftp://host/repo", "scheme 'ftp' is not one of"),
])
def test_bad_urls(url: str, message: str, tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match=message):
        RemoteRepository(url, tmp_path)


@pytest.mark.skipif(importlib.util.find_spec("gcsfs") is not None, reason="gcsfs is installed")
async def test_gs_without_gcsfs_names_the_extra(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match=r"needs the 'gcsfs' package: pip install 'workbench\[gcs\]'"):
        await Server(options("gs://bucket/repo", tmp_path)).start()


@pytest.mark.skipif(importlib.util.find_spec("adlfs") is not None, reason="adlfs is installed")
def test_az_without_adlfs_names_the_extra(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match=r"workbench\[azure\]"):
        RemoteRepository("az://container/repo", tmp_path)


def test_cli_cache_flag() -> None:
    args = build_parser().parse_args(["serve", "--model-repository=s3://b/r",
                                      "--model-repository-cache=/tmp/x"])
    opts = options_from_args(args)
    assert opts.model_repository == ["s3://b/r"] and opts.model_repository_cache == "/tmp/x"
